"""AdaLoRA on a Hugging Face T5 v1.1 (T5Config: 768 wide, 12 + 12 layers, gated-GELU MLP of 2,048,
untied 32,128 vocabulary) for summarisation-style seq2seq: AdaLoRA (init_r 12, target_r 4) on the
attention's q/k/v/o and the MLP's wi_0/wi_1/wo, its orthogonality regulariser added by peft to the
loss, `update_and_allocate(step)` after each optimizer step (the sensitivity EMA, then the budget
masking of the SVD triplets between tinit and total_step - tfinal), AdamW at batch 16, 512 source and
128 target tokens, fp32 with TF32 matmuls; 8 steps in three phases (warm-up, rank pruning, final
fine-tuning), then greedy generation of 32 tokens for 8 sources; 5 phases."""

import os

import torch
from peft import AdaLoraConfig, get_peft_model
from transformers import T5Config, T5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13701)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
B, S, T, NEW = (2, 32, 16, 4) if SMALL else (16, 512, 128, 32)
config = T5Config(
    vocab_size=32128 if not SMALL else 512,
    d_model=768 if not SMALL else 64,
    d_kv=64 if not SMALL else 16,
    d_ff=2048 if not SMALL else 128,
    num_layers=12 if not SMALL else 2,
    num_decoder_layers=12 if not SMALL else 2,
    num_heads=12 if not SMALL else 4,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
    dropout_rate=0.1,
    decoder_start_token_id=0,
    pad_token_id=0,
    eos_token_id=1,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
STEPS = 8
acfg = AdaLoraConfig(
    init_r=12,
    target_r=4,
    tinit=2,
    tfinal=2,
    deltaT=1,
    beta1=0.85,
    beta2=0.85,
    orth_reg_weight=0.5,
    total_step=STEPS,
    lora_alpha=32,
    lora_dropout=0.1,
    target_modules=["q", "k", "v", "o", "wi_0", "wi_1", "wo"],
    task_type="SEQ_2_SEQ_LM",
)
model = get_peft_model(T5ForConditionalGeneration(config), acfg).to(device)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    src = torch.randint(2, config.vocab_size, (B, S), device=device)
    src_mask = torch.ones(B, S, dtype=torch.long, device=device)
    src_mask[B // 2 :, S - S // 4 :] = 0
    labels = torch.randint(2, config.vocab_size, (B, T), device=device)
    labels[:, T - 8 :] = -100
    loss = model(input_ids=src, attention_mask=src_mask, labels=labels).loss
    loss.backward()
    opt.step()
    model.base_model.update_and_allocate(step)
    opt.zero_grad(set_to_none=True)
    if device == "cuda" and step in (1, 5, 7):
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, src, src_mask, labels
model.eval()
with torch.no_grad():
    src = torch.randint(2, config.vocab_size, (8, S), device=device)
    out = model.generate(input_ids=src, max_new_tokens=NEW, do_sample=False, num_beams=1)
if device == "cuda":
    print(
        f"generated {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
