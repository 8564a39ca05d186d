"""A DDPM noise-prediction UNet written by hand: residual blocks with GroupNorm, SiLU and a
sinusoidal timestep embedding, self-attention (SDPA) at 16x16, nearest upsampling with skip
concatenations; fp16 autocast with a GradScaler, AdamW (fused), an EMA of the weights kept with
torch._foreach_lerp_, batch 64 at 64x64, 2 steps; 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4502)
B, HW, C = (2, 32, 16) if SMALL else (64, 64, 128)


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([args.cos(), args.sin()], dim=1)


class Res(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(4 * C, cout)
        self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))) + self.t(temb)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm, self.qkv, self.out = nn.GroupNorm(8, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, 4, c // 4, h * w).permute(1, 0, 2, 4, 3)
        a = F.scaled_dot_product_attention(q, k, v).permute(0, 1, 3, 2).reshape(b, c, h, w)
        return x + self.out(a)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.temb = nn.Sequential(nn.Linear(C, 4 * C), nn.SiLU(), nn.Linear(4 * C, 4 * C))
        self.inp = nn.Conv2d(3, C, 3, padding=1)
        self.d1, self.d2, self.d3 = Res(C, C), Res(C, 2 * C), Res(2 * C, 2 * C)
        self.attn = Attn(2 * C)
        self.u3, self.u2, self.u1 = Res(4 * C, 2 * C), Res(4 * C, C), Res(2 * C, C)
        self.out = nn.Sequential(nn.GroupNorm(8, C), nn.SiLU(), nn.Conv2d(C, 3, 3, padding=1))

    def forward(self, x, t):
        temb = self.temb(timestep_embedding(t, C))
        h1 = self.d1(self.inp(x), temb)
        h2 = self.d2(F.avg_pool2d(h1, 2), temb)
        h3 = self.attn(self.d3(F.avg_pool2d(h2, 2), temb))
        u = self.u3(torch.cat([h3, h3], 1), temb)
        u = self.u2(torch.cat([F.interpolate(u, scale_factor=2.0), h2], 1), temb)
        u = self.u1(torch.cat([F.interpolate(u, scale_factor=2.0), h1], 1), temb)
        return self.out(u)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = UNet().to(device)
ema = [p.detach().clone() for p in model.parameters()]
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=device == "cuda")
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
betas = torch.linspace(1e-4, 0.02, 1000, device=device)
alpha_bar = torch.cumprod(1 - betas, 0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x0 = torch.randn(B, 3, HW, HW, device=device)
    t = torch.randint(0, 1000, (B,), device=device)
    noise = torch.randn_like(x0)
    ab = alpha_bar[t][:, None, None, None]
    xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.mse_loss(model(xt, t).float(), noise)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(ema, [p.detach() for p in model.parameters()], 0.001)
    del x0, t, noise, ab, xt, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
