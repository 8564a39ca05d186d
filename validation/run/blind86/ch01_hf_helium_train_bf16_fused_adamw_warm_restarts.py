"""HF HeliumForCausalLM (GQA, RMSNorm, untied head) built from its config, 10 layers, 1,536 wide,
a 48,000 vocabulary, bf16 weights, 4 x 1,024 tokens, fused AdamW with a CosineAnnealingWarmRestarts
schedule stepped per batch, 3 steps, then one loss evaluated under `torch.no_grad`; 5 phases."""

import os

import torch
from transformers import HeliumConfig, HeliumForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8601)
if SMALL:
    config = HeliumConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = HeliumConfig(
        vocab_size=48000,
        hidden_size=1536,
        intermediate_size=4224,
        num_hidden_layers=10,
        num_attention_heads=12,
        num_key_value_heads=4,
        head_dim=128,
        max_position_embeddings=4096,
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = HeliumForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")
scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2, T_mult=2)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(4, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, loss
model.eval()
with torch.no_grad():
    ids = torch.randint(4, config.vocab_size, (B, L), device=device)
    val = model(input_ids=ids, labels=ids).loss.item()
del ids
if device == "cuda":
    print(f"eval {val:.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
