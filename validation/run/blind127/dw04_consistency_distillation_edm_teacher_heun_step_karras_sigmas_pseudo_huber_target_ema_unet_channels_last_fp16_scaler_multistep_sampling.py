"""Consistency distillation (Song et al. 2023) of an EDM teacher on 32 x 32 images, written by hand:
a UNet (GroupNorm/SiLU residual blocks with the noise level's Fourier embedding, self-attention at
16 x 16 and 8 x 8, channels 128/256/256) as teacher (frozen, half precision weights, eval) and a
student and target network initialised from it; Karras sigmas (N = 18, rho 7), a teacher Heun step
from sigma_{n+1} to sigma_n under no_grad, the EDM preconditioning with the consistency model's
c_skip/c_out boundary condition, the pseudo-Huber loss between student and target, fp16 autocast
with a GradScaler, RAdam, channels_last, and the target network's EMA update through
torch._foreach_mul_/_foreach_add_; then two-step consistency sampling under inference_mode;
batch 128, 3 steps, 5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12704)
B, CH, RES = (4, 32, 16) if SMALL else (128, 128, 32)
MULTS = (1, 2, 2)
N, SIGMA_MIN, SIGMA_MAX, RHO, SIGMA_DATA = 18, 0.002, 80.0, 7.0, 0.5
device = "cuda" if torch.cuda.is_available() else "cpu"


class FourierEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("freqs", torch.randn(dim // 2) * 16)

    def forward(self, x):
        x = x.float()[:, None] * (2 * math.pi * self.freqs[None])
        return torch.cat([x.cos(), x.sin()], 1)


class Block(nn.Module):
    def __init__(self, cin, cout, emb, attn):
        super().__init__()
        self.n1 = nn.GroupNorm(32, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(emb, 2 * cout)
        self.n2 = nn.GroupNorm(32, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.sc = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
        self.attn = attn
        if attn:
            self.na = nn.GroupNorm(32, cout)
            self.qkv = nn.Conv2d(cout, 3 * cout, 1)
            self.proj = nn.Conv2d(cout, cout, 1)

    def forward(self, x, e):
        h = self.c1(F.silu(self.n1(x)))
        scale, shift = self.emb(e)[:, :, None, None].chunk(2, 1)
        h = self.c2(F.silu(self.n2(h) * (1 + scale) + shift))
        x = h + self.sc(x)
        if self.attn:
            b, c, hh, ww = x.shape
            q, k, v = self.qkv(self.na(x)).reshape(b, 3, 4, c // 4, hh * ww).permute(1, 0, 2, 4, 3).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v)
            x = x + self.proj(a.transpose(2, 3).reshape(b, c, hh, ww))
        return x


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        emb = 4 * CH
        self.fourier = FourierEmb(CH)
        self.map = nn.Sequential(nn.Linear(CH, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.stem = nn.Conv2d(3, CH, 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        chans, c = [CH], CH
        for i, m in enumerate(MULTS):
            for _ in range(2):
                self.down.append(Block(c, CH * m, emb, attn=i > 0))
                c = CH * m
                chans.append(c)
            if i < len(MULTS) - 1:
                self.down.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                chans.append(c)
        self.mid = nn.ModuleList([Block(c, c, emb, True), Block(c, c, emb, False)])
        for i, m in reversed(list(enumerate(MULTS))):
            for _ in range(3):
                self.up.append(Block(c + chans.pop(), CH * m, emb, attn=i > 0))
                c = CH * m
            if i > 0:
                self.up.append(nn.Upsample(scale_factor=2))
        self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, 3, 3, padding=1))

    def forward(self, x, c_noise):
        e = self.map(self.fourier(c_noise))
        h = self.stem(x)
        skips = [h]
        for m in self.down:
            h = m(h, e) if isinstance(m, Block) else m(h)
            skips.append(h)
        for m in self.mid:
            h = m(h, e)
        for m in self.up:
            h = m(torch.cat([h, skips.pop()], 1), e) if isinstance(m, Block) else m(h)
        return self.out(h)


def precond(net, x, sigma, consistency):
    s = sigma[:, None, None, None]
    if consistency:
        c_skip = SIGMA_DATA**2 / ((s - SIGMA_MIN) ** 2 + SIGMA_DATA**2)
        c_out = (s - SIGMA_MIN) * SIGMA_DATA / (s**2 + SIGMA_DATA**2).sqrt()
    else:
        c_skip = SIGMA_DATA**2 / (s**2 + SIGMA_DATA**2)
        c_out = s * SIGMA_DATA / (s**2 + SIGMA_DATA**2).sqrt()
    c_in = 1 / (SIGMA_DATA**2 + s**2).sqrt()
    f = net((c_in * x).to(memory_format=torch.channels_last), sigma.log() / 4)
    return c_skip * x + c_out * f.float()


teacher = UNet().to(device).to(memory_format=torch.channels_last)
student = copy.deepcopy(teacher)
target = copy.deepcopy(teacher).requires_grad_(False)
teacher = teacher.half().eval().requires_grad_(False)
opt = torch.optim.RAdam(student.parameters(), lr=2e-5)
scaler = torch.amp.GradScaler(device, init_scale=2.0**12, enabled=device == "cuda")
ramp = torch.linspace(0, 1, N, device=device)
sigmas = (SIGMA_MAX ** (1 / RHO) + ramp * (SIGMA_MIN ** (1 / RHO) - SIGMA_MAX ** (1 / RHO))) ** RHO
data = torch.rand(4 * B, 3, RES, RES, device=device) * 2 - 1
c_huber = 0.00054 * math.sqrt(3 * RES * RES)
if device == "cuda":
    print(f"networks {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x0 = data[torch.randint(0, 4 * B, (B,), device=device)]
    n = torch.randint(0, N - 1, (B,), device=device)
    s_hi, s_lo = sigmas[n], sigmas[n + 1]
    x_hi = x0 + s_hi[:, None, None, None] * torch.randn_like(x0)
    with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
        d_hi = (x_hi - precond(teacher, x_hi, s_hi, False)) / s_hi[:, None, None, None]
        x_lo = x_hi + (s_lo - s_hi)[:, None, None, None] * d_hi
        d_lo = (x_lo - precond(teacher, x_lo, s_lo, False)) / s_lo[:, None, None, None]
        x_lo = x_hi + (s_lo - s_hi)[:, None, None, None] * 0.5 * (d_hi + d_lo)
        y_target = precond(target, x_lo, s_lo, True)
    with torch.autocast(device, dtype=torch.float16):
        y = precond(student, x_hi, s_hi, True)
    loss = (((y - y_target) ** 2).flatten(1).sum(1) + c_huber**2).sqrt().sub(c_huber).mean()
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    with torch.no_grad():
        tp = list(target.parameters())
        sp = [p.detach() for p in student.parameters()]
        torch._foreach_mul_(tp, 0.95)
        torch._foreach_add_(tp, sp, alpha=0.05)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x0, x_hi, d_hi, x_lo, d_lo, y_target, y, loss

student.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16):
    x = torch.randn(2 * B, 3, RES, RES, device=device) * SIGMA_MAX
    x = precond(student, x, torch.full((2 * B,), SIGMA_MAX, device=device), True)
    mid = 0.8
    x = x + math.sqrt(mid**2 - SIGMA_MIN**2) * torch.randn_like(x)
    x = precond(student, x, torch.full((2 * B,), mid, device=device), True).clamp(-1, 1)
if device == "cuda":
    print(
        f"samples mean {x.mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke samples {tuple(x.shape)}")
