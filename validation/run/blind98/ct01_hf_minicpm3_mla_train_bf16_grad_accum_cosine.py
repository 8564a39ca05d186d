"""HF transformers MiniCPM3 (multi-head latent attention: low-rank q and kv projections with a
decoupled rotary part, scaled embeddings and depth-scaled residuals) built from a config at 8 layers,
1,024 wide, 16 heads, vocabulary 73,448 (tied), fp32 weights trained under bf16 autocast with AdamW
(betas 0.9/0.95) and a warm-up + cosine LambdaLR, gradient accumulation over 4 micro-batches of
4 x 1,024 tokens with gradient clipping, 3 optimizer steps; then a no_grad eval loss over a batch of
8; 5 phases."""

import math
import os

import torch
from transformers import MiniCPM3Config, MiniCPM3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9801)
if SMALL:
    cfg = MiniCPM3Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        head_dim=8,
        dim_model_base=32,
    )
    B, L, BE = 2, 32, 2
else:
    cfg = MiniCPM3Config(
        vocab_size=73448,
        hidden_size=1024,
        intermediate_size=2560,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        q_lora_rank=384,
        kv_lora_rank=256,
        qk_nope_head_dim=64,
        qk_rope_head_dim=32,
        v_head_dim=64,
        head_dim=32,
        dim_model_base=256,
    )
    B, L, BE = 4, 1024, 8
ACCUM, STEPS, WARMUP = 4, 3, 1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MiniCPM3ForCausalLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer,
    lambda s: (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / STEPS)),
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    for _micro in range(ACCUM):
        ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss / ACCUM
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids = torch.randint(0, cfg.vocab_size, (BE, L), device=device)
    eval_loss = model(input_ids=ids, labels=ids).loss
if device == "cuda":
    print(
        f"eval {eval_loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
