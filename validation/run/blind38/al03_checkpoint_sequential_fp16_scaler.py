"""A deep residual MLP trained with torch.utils.checkpoint.checkpoint_sequential (4 segments,
use_reentrant=False) under fp16 autocast with a GradScaler, SGD with Nesterov momentum, 24 blocks
of 2048 wide, batch 1024, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3803)
D, N, B = (32, 4, 8) if SMALL else (2048, 24, 1024)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 2 * D)
        self.fc2 = nn.Linear(2 * D, D)

    def forward(self, x):
        return x + self.fc2(F.silu(self.fc1(self.norm(x))))


device = "cuda" if torch.cuda.is_available() else "cpu"
body = nn.Sequential(*[Block() for _ in range(N)]).to(device)
head = nn.Linear(D, 10).to(device)
params = list(body.parameters()) + list(head.parameters())
optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, D, device=device, requires_grad=True)
    y = torch.randint(0, 10, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        h = checkpoint_sequential(body, 4, x, use_reentrant=False)
        loss = F.cross_entropy(head(h), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del x, y, h, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
