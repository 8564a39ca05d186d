"""A DDPM-style denoising UNet at 64 x 64 (channels 128/256/256, two ResBlocks a level with GroupNorm(32),
SiLU and a sinusoidal timestep embedding, SDPA self-attention at 16 x 16, nearest upsampling, skip
concatenations), noise-prediction MSE under fp16 autocast with GradScaler, AdamW, and an EMA copy of the
weights updated with `torch._foreach_lerp_`; batch 48, 3 steps."""

import math
import os

import torch
from torch import nn
from torch.nn import functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH, BASE = (2, 32) if SMALL else (48, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(807)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))) + self.t(temb)[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return h + self.skip(x)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm, self.qkv, self.out = nn.GroupNorm(32, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, 4, c // 4, h * w).transpose(-1, -2).unbind(1)
        a = F.scaled_dot_product_attention(q, k, v).transpose(-1, -2).reshape(b, c, h, w)
        return x + self.out(a)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        c1, c2, tdim = BASE, 2 * BASE, 4 * BASE
        self.temb = nn.Sequential(nn.Linear(BASE, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, c1, 3, padding=1)
        self.d1 = nn.ModuleList([ResBlock(c1, c1, tdim), ResBlock(c1, c1, tdim)])
        self.down1 = nn.Conv2d(c1, c1, 3, 2, 1)
        self.d2 = nn.ModuleList([ResBlock(c1, c2, tdim), ResBlock(c2, c2, tdim)])
        self.down2 = nn.Conv2d(c2, c2, 3, 2, 1)
        self.mid = nn.ModuleList([ResBlock(c2, c2, tdim), ResBlock(c2, c2, tdim)])
        self.attn = Attention(c2)
        self.u2 = nn.ModuleList([ResBlock(2 * c2, c2, tdim), ResBlock(c2, c2, tdim)])
        self.u1 = nn.ModuleList([ResBlock(c2 + c1, c1, tdim), ResBlock(c1, c1, tdim)])
        self.out = nn.Sequential(nn.GroupNorm(32, c1), nn.SiLU(), nn.Conv2d(c1, 3, 3, padding=1))

    def forward(self, x, t):
        half = BASE // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=x.device) / half)
        temb = self.temb(torch.cat([(t[:, None] * freqs).sin(), (t[:, None] * freqs).cos()], 1))
        h1 = self.inp(x)
        for b in self.d1:
            h1 = b(h1, temb)
        h2 = self.down1(h1)
        for b in self.d2:
            h2 = b(h2, temb)
        h = self.down2(h2)
        for b in self.mid:
            h = b(h, temb)
        h = self.attn(h)
        h = torch.cat([F.interpolate(h, scale_factor=2, mode="nearest"), h2], 1)
        for b in self.u2:
            h = b(h, temb)
        h = torch.cat([F.interpolate(h, scale_factor=2, mode="nearest"), h1], 1)
        for b in self.u1:
            h = b(h, temb)
        return self.out(h)


model = UNet().to(device)
ema = [p.detach().clone() for p in model.parameters()]
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
scaler = torch.amp.GradScaler(device)
alphas_bar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, 1000, device=device), 0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x0 = torch.randn(BATCH, 3, 64, 64, device=device)
    t = torch.randint(0, 1000, (BATCH,), device=device)
    noise = torch.randn_like(x0)
    ab = alphas_bar[t][:, None, None, None]
    xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.mse_loss(model(xt, t.float()), noise)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 1e-3)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
