"""HF transformers PhiMoE (Phi-3.5-MoE layout: 16 experts, top-2 sparsemixer routing, router jitter)
built from a config at 6 layers, 1,024 wide, 8 heads with 4 KV heads, a 32,064 vocabulary, in bf16
weights with AdamW (foreach), batch 4 x 1,024 tokens, 3 steps with the router auxiliary loss, then an
eval forward under no_grad; 5 phases."""

import os

import torch
from transformers import PhimoeConfig, PhimoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9101)
if SMALL:
    cfg = PhimoeConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        max_position_embeddings=256,
    )
    B, L = 2, 16
else:
    cfg = PhimoeConfig(
        vocab_size=32064,
        hidden_size=1024,
        intermediate_size=1536,
        num_hidden_layers=6,
        num_attention_heads=8,
        num_key_value_heads=4,
        num_local_experts=16,
        max_position_embeddings=4096,
    )
    B, L = 4, 1024
cfg.output_router_logits = True
cfg.router_aux_loss_coef = 0.01
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = PhimoeForCausalLM(cfg).to(device=device, dtype=dtype)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
model.eval()
with torch.no_grad():
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    logits = model(input_ids=ids).logits
    top = logits[:, -1].argmax(-1)
del ids, logits, top
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
