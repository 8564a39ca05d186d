"""Full-waveform inversion: a 2-D acoustic wave equation (second-order leapfrog, 5-point Laplacian as
a fixed 3 x 3 conv2d, sponge absorbing boundary, Ricker sources of 8 shots along the surface) on
a 384 x 384 grid for 300 time steps, the receiver traces read through a boolean meshgrid mask (a
line of receivers every 4 cells); observed data from a true velocity model with a circular
anomaly under no_grad, then 3 Adam iterations on a velocity perturbation, the simulation
differentiated through torch.utils.checkpoint segments of 25 steps (use_reentrant=False), the
gradient smoothed by avg_pool2d; fp32; 4 phases."""

import math
import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10606)
N, STEPS, SEG, SHOTS = (64, 40, 10, 2) if SMALL else (384, 300, 25, 8)
DX, DT, F0 = 10.0, 1e-3, 15.0
device = "cuda" if torch.cuda.is_available() else "cpu"
yy, xx = torch.meshgrid(torch.arange(N, device=device), torch.arange(N, device=device), indexing="ij")
receivers = (yy == 6) & (xx % 4 == 0) & (xx >= 12) & (xx < N - 12)
edge = torch.minimum(torch.minimum(yy, N - 1 - yy), torch.minimum(xx, N - 1 - xx)).float()
sponge = torch.exp(-((0.015 * (30 - edge).clamp_min(0)) ** 2))[None, None]
lap_kernel = (
    torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], device=device).view(1, 1, 3, 3) / DX**2
)
t = torch.arange(STEPS, device=device) * DT - 1.2 / F0
ricker = (1 - 2 * (math.pi * F0 * t) ** 2) * torch.exp(-((math.pi * F0 * t) ** 2))
sources = torch.zeros(SHOTS, 1, N, N, device=device)
for s in range(SHOTS):
    sources[s, 0, 4, (s + 1) * N // (SHOTS + 1)] = 1.0 / DX**2
background = 2000.0 + 0.5 * yy.float()[None, None] * DX / 10
anomaly = 300.0 * torch.exp(-(((yy - N / 2) ** 2 + (xx - N / 2) ** 2).float() / (N / 10) ** 2))[None, None]


def segment(u, u_prev, vel2dt2, k0):
    traces = []
    for k in range(k0, k0 + SEG):
        lap = F.conv2d(u, lap_kernel, padding=1)
        u_next = (2 * u - u_prev + vel2dt2 * lap + sources * ricker[k]) * sponge
        u_prev, u = u * sponge, u_next
        traces.append(u[:, 0][:, receivers])
    return u, u_prev, torch.stack(traces, 1)


def simulate(vel, ckpt):
    vel2dt2 = (vel * DT) ** 2
    u = torch.zeros(SHOTS, 1, N, N, device=device)
    u_prev = torch.zeros_like(u)
    out = []
    for k0 in range(0, STEPS, SEG):
        if ckpt:
            u, u_prev, tr = checkpoint(segment, u, u_prev, vel2dt2, k0, use_reentrant=False)
        else:
            u, u_prev, tr = segment(u, u_prev, vel2dt2, k0)
        out.append(tr)
    return torch.cat(out, 1)


if device == "cuda":
    print(f"setup {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    observed = simulate(background + anomaly, ckpt=False)
if device == "cuda":
    print(
        f"observed {tuple(observed.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
dv = torch.zeros(1, 1, N, N, device=device, requires_grad=True)
opt = torch.optim.Adam([dv], lr=5.0)
for it in range(3):
    pred = simulate(background + dv, ckpt=True)
    misfit = 0.5 * (pred - observed).pow(2).sum() / SHOTS
    opt.zero_grad(set_to_none=True)
    misfit.backward()
    with torch.no_grad():
        dv.grad.copy_(F.avg_pool2d(dv.grad, 5, stride=1, padding=2))
    opt.step()
    if device == "cuda":
        print(
            f"iter {it} misfit {misfit.item():.4e} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pred, misfit
