"""A 12-layer SwiGLU MLP stack 3,072 wide (8,192 hidden) in fp32, 4 micro-batches of 2,048 rows
accumulated per step, gradients zeroed in place (zero_grad(set_to_none=False)) so they stay allocated,
global-norm clipping and AdamW with foreach, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6905)
D, HID, N, B = (32, 64, 2, 4) if SMALL else (3072, 8192, 12, 2048)


class SwiGLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.up = nn.Linear(D, HID, bias=False), nn.Linear(D, HID, bias=False)
        self.down = nn.Linear(HID, D, bias=False)
        self.norm = nn.LayerNorm(D)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(*[SwiGLU() for _ in range(N)]).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _ in range(4):
        x = torch.randn(B, D, device=device)
        loss = model(x).pow(2).mean() / 4
        loss.backward()
        del x, loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
