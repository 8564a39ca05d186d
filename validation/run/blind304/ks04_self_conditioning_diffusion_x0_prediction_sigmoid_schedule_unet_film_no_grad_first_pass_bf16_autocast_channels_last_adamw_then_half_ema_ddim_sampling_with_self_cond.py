"""Diffusion with self-conditioning (Chen, Zhang & Hinton 2022, "Analog Bits"; as in the RIN and
lucidrains denoising-diffusion reference code): a small UNet over 64x64 RGB images whose input is the
noisy image concatenated with its own previous estimate of x0; during training, half of the steps (chosen
by a seeded Python random.Random, never by tensor values) first run the network under torch.no_grad with
a zero estimate, detach its x0 prediction and feed it back in the gradient-carrying pass. x0 prediction,
continuous time with a sigmoid noise schedule (gamma(t) from Jabri et al. 2022), sinusoidal time
embedding into FiLM scale/shift in each GroupNorm residual block, one self-attention block at 16x16
(SDPA), bf16 autocast with channels_last activations and weights, AdamW (foreach) with an EMA copy
updated by torch._foreach_lerp_; then the EMA copy converted with .half() and DDIM-style sampling
(gamma-schedule, eta 0, 24 steps) under inference_mode, each step feeding the previous x0 estimate back.

Phases: 0 model, EMA, optimizer; 1 a step with self-conditioning; 2 a step without; 3 four more steps;
4 fp16 sampling."""

import copy
import math
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(30404)
rng = random.Random(30404)
device = "cuda" if torch.cuda.is_available() else "cpu"
C, B, RES, STEPS, NSAMP, SSTEPS = (16, 2, 32, 2, 2, 2) if SMALL else (128, 48, 64, 4, 64, 24)
cl = torch.channels_last


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def sigmoid_gamma(t, start=-3.0, end=3.0, tau=1.0):
    v_start = torch.sigmoid(torch.tensor(start / tau))
    v_end = torch.sigmoid(torch.tensor(end / tau))
    out = torch.sigmoid((t * (end - start) + start) / tau)
    return ((v_end - out) / (v_end - v_start)).clamp(1e-9, 1.0)


def time_embed(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t[:, None] * 1000 * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1).to(t.dtype)


def gn(ch):
    return nn.GroupNorm(32 if ch % 32 == 0 else 8, ch)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1 = gn(cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.film = nn.Linear(tdim, 2 * cout)
        self.n2 = gn(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x)))
        scale, shift = self.film(temb)[..., None, None].chunk(2, dim=1)
        h = self.n2(h) * (1 + scale) + shift
        h = self.c2(F.silu(h))
        return h + self.skip(x)


class Attention(nn.Module):
    def __init__(self, ch, heads=4):
        super().__init__()
        self.norm = gn(ch)
        self.qkv = nn.Conv2d(ch, 3 * ch, 1)
        self.proj = nn.Conv2d(ch, ch, 1)
        self.heads = heads

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).unbind(1)
        o = F.scaled_dot_product_attention(q.transpose(-1, -2), k.transpose(-1, -2), v.transpose(-1, -2))
        return x + self.proj(o.transpose(-1, -2).reshape(b, c, h, w))


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        tdim = 4 * C
        self.tmlp = nn.Sequential(nn.Linear(C, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(6, C, 3, padding=1)
        self.d1 = ResBlock(C, C, tdim)
        self.down1 = nn.Conv2d(C, C, 3, 2, 1)
        self.d2 = ResBlock(C, 2 * C, tdim)
        self.down2 = nn.Conv2d(2 * C, 2 * C, 3, 2, 1)
        self.mid1 = ResBlock(2 * C, 2 * C, tdim)
        self.attn = Attention(2 * C)
        self.mid2 = ResBlock(2 * C, 2 * C, tdim)
        self.u2 = ResBlock(4 * C, 2 * C, tdim)
        self.u1 = ResBlock(3 * C, C, tdim)
        self.out = nn.Sequential(gn(C), nn.SiLU(), nn.Conv2d(C, 3, 3, padding=1))

    def forward(self, x, t, x_self):
        temb = self.tmlp(time_embed(t, C))
        h = self.inp(torch.cat([x, x_self], dim=1))
        h1 = self.d1(h, temb)
        h2 = self.d2(self.down1(h1), temb)
        m = self.mid2(self.attn(self.mid1(self.down2(h2), temb)), temb)
        u = self.u2(torch.cat([F.interpolate(m, scale_factor=2.0, mode="nearest"), h2], 1), temb)
        u = self.u1(torch.cat([F.interpolate(u, scale_factor=2.0, mode="nearest"), h1], 1), temb)
        return self.out(u)


def make_batch(n):
    base = torch.rand(n, 3, 8, 8, device=device) * 2 - 1
    return F.interpolate(base, size=RES, mode="bilinear", align_corners=False).contiguous(memory_format=cl)


model = UNet().to(device, memory_format=cl)
ema = copy.deepcopy(model).requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0, foreach=True)
ema_p, live_p = list(ema.parameters()), list(model.parameters())
print("params", sum(p.numel() for p in model.parameters()))
report("setup")

plan = [True, False] + [rng.random() < 0.5 for _ in range(STEPS)]
for step, use_self_cond in enumerate(plan):
    x0 = make_batch(B)
    t = torch.rand(B, device=device)
    g = sigmoid_gamma(t).view(-1, 1, 1, 1)
    noise = torch.randn_like(x0)
    xt = g.sqrt() * x0 + (1 - g).sqrt() * noise
    x_self = torch.zeros_like(xt)
    with torch.autocast(device, dtype=torch.bfloat16):
        if use_self_cond:
            with torch.no_grad():
                x_self = model(xt, t, x_self).float().clamp(-1, 1).detach()
        pred = model(xt, t, x_self)
        loss = F.mse_loss(pred.float(), x0)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        torch._foreach_lerp_(ema_p, live_p, 1 - 0.995)
    print(f"step {step} self_cond {use_self_cond} loss {loss.item():.4f}")
    del x0, t, g, noise, xt, x_self, pred, loss
    if step < 2:
        report(f"step{step}")
report("train")

del opt
sampler = ema.half().eval()
with torch.inference_mode():
    x = torch.randn(NSAMP, 3, RES, RES, device=device, dtype=torch.float16).contiguous(memory_format=cl)
    x_self = torch.zeros_like(x)
    times = torch.linspace(1.0, 0.0, SSTEPS + 1, device=device)
    for i in range(SSTEPS):
        t_now = times[i].expand(NSAMP)
        g_now = sigmoid_gamma(times[i]).half()
        g_next = sigmoid_gamma(times[i + 1]).half()
        x0_hat = sampler(x, t_now.half(), x_self).clamp(-1, 1)
        eps = (x - g_now.sqrt() * x0_hat) / (1 - g_now).clamp(min=1e-5).sqrt()
        x = g_next.sqrt() * x0_hat + (1 - g_next).sqrt() * eps
        x_self = x0_hat
    img = ((x0_hat.float() + 1) * 127.5).round().to(torch.uint8).cpu()
print("samples", tuple(img.shape), f"{img.float().mean().item():.2f}")
report("sample")
