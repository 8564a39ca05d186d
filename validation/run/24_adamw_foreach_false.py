"""Residual MLP blocks (pre-LayerNorm) trained with torch.optim.AdamW(foreach=False), the per-parameter
for-loop implementation."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, D, BLOCKS = (8, 32, 2) if os.environ.get("SMOKE") else (4096, 1024, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class ResBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


model = nn.Sequential(*[ResBlock() for _ in range(BLOCKS)], nn.Linear(D, 100)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
