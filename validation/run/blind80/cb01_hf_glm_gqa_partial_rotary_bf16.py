"""HF GlmForCausalLM (GLM-4-style: 2 KV heads, rotary on half of each head, biased qkv, fused
gate-up MLP) built from its config, 16 layers, 2,048 wide, a 151,552 vocabulary, bf16 weights, AdamW,
batch 2 of 2,048 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import GlmConfig, GlmForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8001)
if SMALL:
    config = GlmConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        pad_token_id=0,
    )
    B, L = 2, 16
else:
    config = GlmConfig(
        vocab_size=151552,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=128,
        pad_token_id=0,
    )
    B, L = 2, 2048
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GlmForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
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
