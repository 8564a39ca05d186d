"""A 12-block MLP (Linear-GELU-LayerNorm) trained with torch.utils.checkpoint.checkpoint_sequential in 4
segments, fp32, AdamW; one step without checkpointing first."""

import os

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

D, B = (32, 8) if os.environ.get("SMOKE") else (2048, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(45)
blocks = [nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.LayerNorm(D)) for _ in range(12)]
model = nn.Sequential(*blocks).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, D, device=device)
    y = model(x) if step == 0 else checkpoint_sequential(model, 4, x, use_reentrant=False)
    loss = y.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
