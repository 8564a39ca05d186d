"""Super-resolution: an ESPCN-style network (three convolutions, then a pixel shuffle by 4) learning
the residual over a bicubic upsample of 96x96 crops to 384x384, L1 plus a gradient-difference loss,
fp32, Adam, batch 32, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4603)
B, HW = (2, 16) if SMALL else (32, 96)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Conv2d(3, 64, 5, padding=2),
    nn.Tanh(),
    nn.Conv2d(64, 32, 3, padding=1),
    nn.Tanh(),
    nn.Conv2d(32, 3 * 16, 3, padding=1),
    nn.PixelShuffle(4),
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    lr = torch.rand(B, 3, HW, HW, device=device)
    hr = torch.rand(B, 3, 4 * HW, 4 * HW, device=device)
    up = F.interpolate(lr, scale_factor=4, mode="bicubic", align_corners=False)
    sr = up + model(lr)
    dx = (sr[..., 1:] - sr[..., :-1]) - (hr[..., 1:] - hr[..., :-1])
    dy = (sr[..., 1:, :] - sr[..., :-1, :]) - (hr[..., 1:, :] - hr[..., :-1, :])
    loss = F.l1_loss(sr, hr) + 0.1 * (dx.abs().mean() + dy.abs().mean())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del lr, hr, up, sr, dx, dy, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
