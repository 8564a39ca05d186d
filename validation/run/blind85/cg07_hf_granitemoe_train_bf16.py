"""HF GraniteMoeForCausalLM (top-8 of 32 experts through ParallelExperts, embedding/residual/
attention/logits multipliers) built from its config, 8 layers, 1,024 wide, a 49,155 vocabulary,
bf16 weights, 4 x 512 tokens, AdamW (foreach), 3 steps; 4 phases."""

import os

import torch
from transformers import GraniteMoeConfig, GraniteMoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8507)
if SMALL:
    config = GraniteMoeConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = GraniteMoeConfig(
        vocab_size=49155,
        hidden_size=1024,
        intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        num_local_experts=32,
        num_experts_per_tok=8,
        max_position_embeddings=4096,
        embedding_multiplier=12.0,
        logits_scaling=4.0,
        residual_multiplier=0.22,
        attention_multiplier=0.0078125,
    )
    B, L = 4, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = GraniteMoeForCausalLM(config).to(device=device, dtype=dtype)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
