"""HF MistralForCausalLM from a MistralConfig (1024 wide, 8 layers, 16 heads, 4 key-value heads,
sliding_window=256, 32,000 vocabulary), bf16 weights, sdpa attention, AdamW(fused=True),
batch 4 x 1024, 3 steps; 4 phases."""

import os

import torch
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2401)
if SMALL:
    config = MistralConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
    )
    B, T = 2, 16
else:
    config = MistralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        sliding_window=256,
    )
    B, T = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
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
