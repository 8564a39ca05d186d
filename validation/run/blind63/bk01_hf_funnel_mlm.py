"""HF FunnelForMaskedLM from a FunnelConfig (funnel-transformer/medium sizes: blocks of 3, 3 and 3
layers, 768 wide, the sequence pooled by 2 between blocks and upsampled back by the decoder), masked-LM
training on 512-token sequences at batch 8, fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import FunnelConfig, FunnelForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6301)
if SMALL:
    config = FunnelConfig(vocab_size=100, block_sizes=[1, 1], d_model=32, n_head=2, d_head=16, d_inner=64)
    B, L = 2, 16
else:
    config = FunnelConfig(vocab_size=30522, block_sizes=[3, 3, 3])
    B, L = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = FunnelForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    labels = torch.where(torch.rand(B, L, device=device) < 0.15, ids, torch.full_like(ids, -100))
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
