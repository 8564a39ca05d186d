"""Particle and grid simulations with plain tensor code: a direct all-pairs N-body integrator (16384
softened gravitating particles, accelerations from pairwise displacement blocks computed in 2048-row
chunks, kick-drift-kick leapfrog with in-place add_/mul_ updates, fp32), the total energy checked in
float64 (potential from torch.cdist in chunks, triu masking); then an explicit finite-difference heat
equation on a 2048x2048 grid with a 5-point stencil built from torch.roll (periodic boundaries, fp32,
torch.add(..., out=) into a ping-pong buffer); then the 2-D wave equation on a batch of 8 grids of
1024x1024 with the Laplacian as a fixed 3x3 conv2d kernel (zero padding), leapfrog in time with the
state in bf16 and torch.mul/add out= variants.

Phases: 0 particles created; 1 N-body leapfrog (10 steps); 2 float64 energy; 3 heat equation (200 steps,
roll stencil); 4 wave equation (100 steps, conv2d stencil, bf16)."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3222)
device = "cuda" if torch.cuda.is_available() else "cpu"
NP, CH = (1024, 256) if SMALL else (16384, 2048)
G = 256 if SMALL else 2048
WB, WG = (2, 128) if SMALL else (8, 1024)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


pos = torch.randn(NP, 3, device=device)
vel = torch.randn(NP, 3, device=device) * 0.1
mass = torch.rand(NP, device=device) + 0.5
report("init")

EPS2, DT = 1e-2, 1e-3


def accelerations(p):
    acc = torch.empty_like(p)
    for s in range(0, p.shape[0], CH):
        diff = p[None, :, :] - p[s : s + CH, None, :]  # (ch, N, 3)
        r2 = diff.pow(2).sum(-1).add_(EPS2)
        inv_r3 = r2.pow_(-1.5).mul_(mass[None, :])
        acc[s : s + CH] = (diff * inv_r3.unsqueeze(-1)).sum(1)
    return acc


acc = accelerations(pos)
for _ in range(10):
    vel.add_(acc, alpha=0.5 * DT)
    pos.add_(vel, alpha=DT)
    acc = accelerations(pos)
    vel.add_(acc, alpha=0.5 * DT)
print(f"nbody com {(pos * mass[:, None]).sum(0).norm().item():.4f}")
report("nbody")

p64, v64, m64 = pos.double(), vel.double(), mass.double()
kinetic = 0.5 * (m64 * v64.pow(2).sum(1)).sum()
potential = torch.zeros((), dtype=torch.float64, device=device)
for s in range(0, NP, CH):
    d = torch.cdist(p64[s : s + CH], p64)
    inv = (d.pow(2) + EPS2).rsqrt()
    rows = torch.arange(s, min(s + CH, NP), device=device)[:, None]
    cols = torch.arange(NP, device=device)[None, :]
    inv = torch.where(cols > rows, inv, torch.zeros_like(inv))
    potential -= (m64[s : s + CH, None] * inv * m64[None, :]).sum()
print(f"energy {(kinetic + potential).item():.4f}")
del p64, v64, d, inv
report("energy")

# Heat equation, periodic, 5-point stencil by roll
u = torch.zeros(G, G, device=device)
u[G // 4 : 3 * G // 4, G // 4 : 3 * G // 4] = 1.0
u_next = torch.empty_like(u)
alpha = 0.2
for _ in range(200):
    lap = torch.roll(u, 1, 0) + torch.roll(u, -1, 0) + torch.roll(u, 1, 1) + torch.roll(u, -1, 1) - 4.0 * u
    torch.add(u, lap, alpha=alpha, out=u_next)
    u, u_next = u_next, u
print(f"heat total {u.sum().item():.3f}")
del u, u_next, lap
report("heat")

# Wave equation, conv2d Laplacian, bf16 state
kernel = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], device=device)
kernel = kernel.to(torch.bfloat16).view(1, 1, 3, 3)
xs = torch.linspace(-1, 1, WG, device=device)
r2 = xs[:, None] ** 2 + xs[None, :] ** 2
w_prev = torch.exp(-r2[None, None] * torch.linspace(50, 200, WB, device=device).view(WB, 1, 1, 1))
w_prev = w_prev.to(torch.bfloat16)
w = w_prev.clone()
w_new = torch.empty_like(w)
c2 = 0.25
for _ in range(100):
    lap = F.conv2d(w, kernel, padding=1)
    torch.mul(lap, c2, out=lap)
    torch.add(lap, w, alpha=2.0, out=w_new)
    w_new.sub_(w_prev)
    w_prev, w, w_new = w, w_new, w_prev
print(f"wave energy {w.float().pow(2).sum().item():.3f}")
report("wave")
