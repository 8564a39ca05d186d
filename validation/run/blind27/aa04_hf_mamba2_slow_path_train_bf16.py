"""HF Mamba2ForCausalLM on its torch path (no mamba_ssm kernels: the chunked SSD scan in einsums and
cumsums) from a small Mamba2Config (768 wide, 4 layers, 24 heads of 64, state 64, chunks of 128), bf16
weights, batch 2 at 1024 tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from transformers import Mamba2Config, Mamba2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2704)
if SMALL:
    config = Mamba2Config(
        vocab_size=128,
        hidden_size=32,
        num_heads=4,
        head_dim=16,
        state_size=8,
        n_groups=1,
        num_hidden_layers=1,
        chunk_size=8,
    )
    B, S = 2, 16
else:
    config = Mamba2Config(
        vocab_size=32000,
        hidden_size=768,
        num_heads=24,
        head_dim=64,
        state_size=64,
        n_groups=1,
        num_hidden_layers=4,
        chunk_size=128,
    )
    B, S = 2, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Mamba2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
