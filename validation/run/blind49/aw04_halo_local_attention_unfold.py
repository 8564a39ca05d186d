"""Blocked local self-attention with halos, written by hand (HaloNet style): queries in 8x8 blocks,
keys and values from the 12x12 windows around them gathered by `F.unfold`, relative position
logits, 4 stages over a 64x64 map of 256 channels with 8 heads, fp32, SGD momentum, batch 16,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4904)
B, HW, C, HEADS, BLOCK, HALO = (2, 16, 32, 2, 8, 2) if SMALL else (16, 64, 256, 8, 8, 2)
WIN = BLOCK + 2 * HALO
device = "cuda" if torch.cuda.is_available() else "cpu"


class HaloAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Conv2d(C, C, 1, bias=False)
        self.kv = nn.Conv2d(C, 2 * C, 1, bias=False)
        self.rel = nn.Parameter(torch.randn(HEADS, BLOCK * BLOCK, WIN * WIN) * 0.02)
        self.out = nn.Conv2d(C, C, 1)
        self.norm = nn.BatchNorm2d(C)

    def forward(self, x):
        b, c, h, w = x.shape
        d, nb = c // HEADS, (h // BLOCK) * (w // BLOCK)
        q = self.q(x).view(b, HEADS, d, h // BLOCK, BLOCK, w // BLOCK, BLOCK)
        q = q.permute(0, 1, 3, 5, 4, 6, 2).reshape(b, HEADS, nb, BLOCK * BLOCK, d)
        kv = F.unfold(self.kv(x), WIN, padding=HALO, stride=BLOCK)
        kv = kv.view(b, 2, HEADS, d, WIN * WIN, nb).permute(1, 0, 2, 5, 4, 3)
        k, v = kv[0], kv[1]
        attn = (q @ k.transpose(-1, -2)) * d**-0.5 + self.rel[:, None]
        o = attn.softmax(-1) @ v
        o = o.view(b, HEADS, h // BLOCK, w // BLOCK, BLOCK, BLOCK, d).permute(0, 1, 6, 2, 4, 3, 5)
        return x + self.norm(self.out(o.reshape(b, c, h, w)))


model = nn.Sequential(
    *[HaloAttention() for _ in range(4)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(C, 100)
)
model = model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, C, HW, HW, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
