"""HF FalconForCausalLM from a FalconConfig (1024 wide, 8 layers, 16 heads, multi-query attention,
parallel attention and MLP, 65,024 vocabulary), bf16 weights, AdamW (foreach default) with weight
decay, batch 4 x 1024 tokens, labels = inputs, 3 steps; 4 phases."""

import os

import torch
from transformers import FalconConfig, FalconForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2101)
if SMALL:
    config = FalconConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    B, T = 2, 16
else:
    config = FalconConfig(
        vocab_size=65024,
        hidden_size=1024,
        num_hidden_layers=8,
        num_attention_heads=16,
        multi_query=True,
        parallel_attn=True,
        bias=False,
    )
    B, T = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = FalconForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
