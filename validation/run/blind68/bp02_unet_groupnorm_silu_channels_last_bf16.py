"""A hand-written 2-D UNet (4 levels, 64-512 channels, two GroupNorm(32)+SiLU+conv residual blocks per
level, strided-conv downsampling, nearest upsampling, skip concatenations) in channels-last memory
format under bf16 autocast, 128x128 images at batch 32, an L2 denoising loss, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6802)
B, S = (2, 32) if SMALL else (32, 128)
CH = [64, 128, 256, 512]


class Res(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, CH[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.pool = nn.ModuleList()
        c = CH[0]
        for i, ch in enumerate(CH):
            self.down.append(nn.Sequential(Res(c, ch), Res(ch, ch)))
            self.pool.append(nn.Conv2d(ch, ch, 3, stride=2, padding=1) if i < len(CH) - 1 else nn.Identity())
            c = ch
        self.up = nn.ModuleList()
        for ch in reversed(CH[:-1]):
            self.up.append(nn.Sequential(Res(c + ch, ch), Res(ch, ch)))
            c = ch
        self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

    def forward(self, x):
        x = self.inp(x)
        skips = []
        for blk, pool in zip(self.down, self.pool, strict=True):
            x = blk(x)
            skips.append(x)
            x = pool(x)
        skips.pop()
        for blk in self.up:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            x = blk(torch.cat([x, skips.pop()], dim=1))
        return self.out(x)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = UNet().to(device=device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clean = torch.randn(B, 3, S, S, device=device).contiguous(memory_format=torch.channels_last)
    noise = torch.randn_like(clean)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.mse_loss(model(clean + noise).float(), noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clean, noise, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
