"""Particle-mesh N-body gravity in fp32: 2,097,152 particles on a periodic 128^3 grid; each
kick-drift-kick leapfrog step deposits mass by cloud-in-cell (8 corner weights, index_add_ into the
flattened grid), solves Poisson's equation with rfftn / irfftn (Green's function -1/k^2, a
Gaussian smoothing kernel), takes the force as the spectral gradient ik*phi per axis, interpolates
it back to the particles with the same 8 weights (gather), 6 steps; then a power spectrum of the
density contrast binned by |k| with bincount; 3 phases."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9405)
N, G, STEPS, DT = (4096, 16, 2, 0.01) if SMALL else (2_097_152, 128, 6, 0.01)
device = "cuda" if torch.cuda.is_available() else "cpu"

pos = torch.rand(N, 3, device=device) * G
vel = torch.randn(N, 3, device=device) * 0.1
k1 = torch.fft.fftfreq(G, d=1.0 / G, device=device) * (2 * torch.pi / G)
kr = torch.fft.rfftfreq(G, d=1.0 / G, device=device) * (2 * torch.pi / G)
kx, ky, kz = torch.meshgrid(k1, k1, kr, indexing="ij")
k2 = kx**2 + ky**2 + kz**2
green = torch.where(k2 > 0, -1.0 / k2, torch.zeros_like(k2)) * torch.exp(-k2 * 1.5**2 / 2)
kvec = (kx, ky, kz)
offsets = torch.tensor([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], device=device)
if device == "cuda":
    print(f"setup {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def cic(p):
    base = torch.floor(p)
    frac = p - base
    base = base.long()
    corners = (base.unsqueeze(1) + offsets) % G  # (N, 8, 3)
    w = torch.where(offsets.bool(), frac.unsqueeze(1), 1 - frac.unsqueeze(1)).prod(-1)  # (N, 8)
    flat = (corners[..., 0] * G + corners[..., 1]) * G + corners[..., 2]
    return flat.reshape(-1), w.reshape(-1)


def forces(p):
    idx, w = cic(p)
    rho = torch.zeros(G**3, device=device).index_add_(0, idx, w)
    delta = rho.view(G, G, G) / rho.mean() - 1
    phi_k = torch.fft.rfftn(delta) * green
    acc = torch.empty(N, 3, device=device)
    for axis in range(3):
        grid = torch.fft.irfftn(-1j * kvec[axis] * phi_k, s=(G, G, G)).reshape(-1)
        acc[:, axis] = (grid[idx] * w).view(N, 8).sum(1)
        del grid
    return acc, delta


acc, _ = forces(pos)
for _ in range(STEPS):
    vel += 0.5 * DT * acc
    pos = (pos + DT * vel) % G
    acc, delta = forces(pos)
    vel += 0.5 * DT * acc
if device == "cuda":
    print(f"leapfrog peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

power = torch.fft.rfftn(delta).abs() ** 2
kbin = (k2.sqrt() / (2 * torch.pi / G)).round().long().reshape(-1)
pk = torch.bincount(kbin, weights=power.reshape(-1)) / torch.bincount(kbin).clamp(min=1)
if device == "cuda":
    print(
        f"spectrum bins {pk.numel()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del power, kbin, pk, acc, delta
if device == "cuda":
    print(f"end {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
