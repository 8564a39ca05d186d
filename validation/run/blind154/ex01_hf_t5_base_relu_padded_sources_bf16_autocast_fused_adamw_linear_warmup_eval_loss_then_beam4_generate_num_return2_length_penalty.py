"""A T5-base built from T5Config (768 wide, 12 + 12 layers, 12 heads, ReLU feed-forward of 3,072,
vocabulary 32,128, fp32 weights) fine-tuned on a translation-style task as a Hugging Face user
writes it: batches of 24 sources padded to 512 tokens (each source 192..512 real tokens, the tail
masked by attention_mask) and 128-token targets whose pad tail is -100; bf16 autocast, fused AdamW
(lr 3e-4, weight decay 0.01 off biases and layer norms) with a linear warmup schedule,
clip_grad_norm_ at 1.0, 4 steps; then the teacher-forced loss of 64 held-out pairs at batch 32 under
no_grad; then beam search with 4 beams, length_penalty 0.8 and num_return_sequences 2 for 16 sources
(64 new tokens, the length fixed by min_new_tokens) under inference_mode and bf16 autocast; 4
phases."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15401)
torch.backends.cuda.matmul.allow_tf32 = True
if SMALL:
    config = T5Config(
        vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4
    )
    B, SRC, TGT, STEPS, EVAL_N, EVAL_B, GEN_B, NEW = 2, 24, 8, 2, 4, 2, 2, 4
else:
    config = T5Config(
        vocab_size=32128,
        d_model=768,
        d_kv=64,
        d_ff=3072,
        num_layers=12,
        num_decoder_layers=12,
        num_heads=12,
        feed_forward_proj="relu",
    )
    B, SRC, TGT, STEPS, EVAL_N, EVAL_B, GEN_B, NEW = 24, 512, 128, 4, 64, 32, 16, 64
config.decoder_start_token_id = 0
config.pad_token_id = 0
config.eos_token_id = 1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = T5ForConditionalGeneration(config).to(device)

decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if name.endswith("bias") or "layer_norm" in name else decay).append(p)
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    fused=device == "cuda",
)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=100)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(n):
    src = torch.randint(2, config.vocab_size, (n, SRC), device=device)
    mask = torch.ones(n, SRC, dtype=torch.long, device=device)
    for i in range(n):
        real = SRC - (i * 37) % (SRC * 5 // 8)
        src[i, real:] = config.pad_token_id
        mask[i, real:] = 0
    labels = torch.randint(2, config.vocab_size, (n, TGT), device=device)
    labels[:, -1] = config.eos_token_id
    labels[n // 3 :, TGT - TGT // 4 :] = -100
    return src, mask, labels


model.train()
for step in range(STEPS):
    src, mask, labels = make_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=src, attention_mask=mask, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
del src, mask, labels, loss
if device == "cuda":
    print(
        f"train allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
total = 0.0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(EVAL_N // EVAL_B):
        src, mask, labels = make_batch(EVAL_B)
        total += model(input_ids=src, attention_mask=mask, labels=labels).loss.item()
print(f"eval loss {total / (EVAL_N // EVAL_B):.4f}")
del src, mask, labels
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    src, mask, _ = make_batch(GEN_B)
    out = model.generate(
        input_ids=src,
        attention_mask=mask,
        num_beams=4,
        num_return_sequences=2,
        length_penalty=0.8,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        early_stopping=True,
    )
print(f"generate {tuple(out.shape)}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
