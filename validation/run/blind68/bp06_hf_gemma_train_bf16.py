"""HF GemmaForCausalLM from a GemmaConfig (gemma-2b-like: 18 layers, 2,048 wide, multi-query attention
with 256-wide heads, GeGLU 16,384 wide, a 256k tied vocabulary scaled by sqrt(hidden)), bf16 weights,
batch 2 of 1,024 tokens, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import GemmaConfig, GemmaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6806)
if SMALL:
    config = GemmaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    B, L = 2, 16
else:
    config = GemmaConfig(
        vocab_size=256000,
        hidden_size=2048,
        intermediate_size=16384,
        num_hidden_layers=18,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=256,
    )
    B, L = 2, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GemmaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(1, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
