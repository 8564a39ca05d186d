"""HF PersimmonForCausalLM (squared-ReLU MLP, query/key layer norms, partial rotary) built from its
config, 16 layers, 2,048 wide, bf16 weights, fused AdamW, batch 4 of 1,024 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import PersimmonConfig, PersimmonForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7904)
if SMALL:
    config = PersimmonConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = PersimmonConfig(
        vocab_size=65536,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        max_position_embeddings=2048,
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = PersimmonForCausalLM(config).to(device=device, dtype=torch.bfloat16)
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
