"""Pegasus-large fine-tuning for extreme summarization (Zhang et al. 2020, the XSum setting), a
PegasusForConditionalGeneration built from a PegasusConfig with no downloads: d_model 1,024, 16 encoder
and 16 decoder layers, 16 heads, FFN 4,096, vocabulary 96,103, sinusoidal positions, scaled embeddings,
pre-layer-norm, dropout 0.1. Documents of 512 tokens and one-sentence summaries of 64 (`labels`, -100 past
each summary's end, shifted right by the model with decoder_start_token_id 0), batch 16. Gradient
checkpointing on (model.gradient_checkpointing_enable(), non-reentrant), fp16 autocast over fp32 weights
with torch.amp.GradScaler (defaults) and torch.optim.Adam (lr 1e-4, foreach by default), clip at 1.0: the
first step its own phase, then 3 steps; then model.eval() under no_grad: the teacher-forced loss at batch
32, and `generate()` sampling 4 summaries per document (do_sample, top_k 50, top_p 0.9, temperature 0.8,
num_return_sequences 4, 48 new tokens with min_new_tokens 48) at batch 16 in fp16 autocast; 4 phases."""

import os

import torch
from transformers import PegasusConfig, PegasusForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18503)
if SMALL:
    D, FF, L, H, VOCAB = 64, 128, 2, 4, 1000
    B, STEPS, EVAL_B, GEN_B, SRC, TGT, GEN = 2, 2, 2, 2, 64, 16, 6
else:
    D, FF, L, H, VOCAB = 1024, 4096, 16, 16, 96103
    B, STEPS, EVAL_B, GEN_B, SRC, TGT, GEN = 16, 4, 32, 16, 512, 64, 48
device = "cuda" if torch.cuda.is_available() else "cpu"
PAD, EOS = 0, 1

config = PegasusConfig(
    vocab_size=VOCAB,
    d_model=D,
    encoder_layers=L,
    decoder_layers=L,
    encoder_attention_heads=H,
    decoder_attention_heads=H,
    encoder_ffn_dim=FF,
    decoder_ffn_dim=FF,
    max_position_embeddings=1024,
    dropout=0.1,
    attention_dropout=0.1,
    activation_function="relu",
    scale_embedding=True,
    pad_token_id=PAD,
    eos_token_id=EOS,
    decoder_start_token_id=PAD,
    forced_eos_token_id=EOS,
)
model = PegasusForConditionalGeneration(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
print(f"params {sum(p.numel() for p in model.parameters())}")


def xsum_batch(bs):
    input_ids = torch.randint(2, VOCAB, (bs, SRC), device=device)
    input_ids[:, -1] = EOS
    attention_mask = torch.ones_like(input_ids)
    labels = torch.randint(2, VOCAB, (bs, TGT), device=device)
    lengths = torch.randint(TGT // 2, TGT, (bs, 1), device=device)
    pos = torch.arange(TGT, device=device)[None, :]
    labels = torch.where(pos == lengths, torch.full_like(labels, EOS), labels)
    labels = torch.where(pos > lengths, torch.full_like(labels, -100), labels)
    return input_ids, attention_mask, labels


optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    input_ids, attention_mask, labels = xsum_batch(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} grad norm {grad_norm.item():.3f} scale {scaler.get_scale()}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del loss, grad_norm
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    input_ids, attention_mask, labels = xsum_batch(EVAL_B)
    val_loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
print(f"val loss {val_loss.item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    samples = model.generate(
        input_ids=input_ids[:GEN_B],
        attention_mask=attention_mask[:GEN_B],
        do_sample=True,
        top_k=50,
        top_p=0.9,
        temperature=0.8,
        num_return_sequences=4,
        max_new_tokens=GEN,
        min_new_tokens=GEN,
    )
print(f"samples {tuple(samples.shape)}")
if device == "cuda":
    print(
        f"generate allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
