"""HF StableLmForCausalLM from a StableLmConfig (2,048 wide, 16 layers, rotary on a quarter of each
head, per-head QK layer norms, parallel residual off, LayerNorm with bias), bf16 weights, trained at
batch 8 of 1,024 tokens with AdamW(fused=True), 2 steps; 3 phases."""

import os

import torch
from transformers import StableLmConfig, StableLmForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6506)
if SMALL:
    config = StableLmConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        qk_layernorm=True,
    )
    B, L = 2, 16
else:
    config = StableLmConfig(
        vocab_size=50304,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=32,
        partial_rotary_factor=0.25,
        qk_layernorm=True,
    )
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = StableLmForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
