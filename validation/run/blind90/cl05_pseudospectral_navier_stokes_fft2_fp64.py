"""Scientific code on the GPU: a pseudo-spectral solver of 2-D incompressible Navier-Stokes in
vorticity form on a periodic 512 x 512 grid, 8 random initial fields in float64 (complex128
spectra through torch.fft.fft2/ifft2, 2/3-rule dealiasing, Crank-Nicolson viscosity, a forcing
term), 200 steps with a snapshot every 20, then a proper orthogonal decomposition of the
snapshots through torch.linalg.eigh of their Gram matrix; 3 phases."""

import math
import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9005)
N, B, STEPS, EVERY = (32, 2, 10, 5) if SMALL else (512, 8, 200, 20)
NU, DT = 1e-4, 1e-3
device = "cuda" if torch.cuda.is_available() else "cpu"
f64 = torch.float64

k = torch.fft.fftfreq(N, d=1.0 / N, dtype=f64, device=device)
kx, ky = torch.meshgrid(k, k, indexing="ij")
lap = kx**2 + ky**2
lap_inv = torch.where(lap == 0, torch.zeros_like(lap), 1.0 / lap)
dealias = ((kx.abs() < N / 3) & (ky.abs() < N / 3)).to(f64)
xs = torch.linspace(0, 2 * math.pi, N + 1, dtype=f64, device=device)[:-1]
gx, gy = torch.meshgrid(xs, xs, indexing="ij")
forcing_hat = torch.fft.fft2(0.1 * (torch.sin(gx + gy) + torch.cos(gx + gy)))
if device == "cuda":
    print(f"grid {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

w = torch.randn(B, N, N, dtype=f64, device=device)
w_hat = torch.fft.fft2(w) * dealias * torch.exp(-lap / (N / 8) ** 2)
snapshots = []
for step in range(STEPS):
    psi_hat = w_hat * lap_inv
    u = torch.fft.ifft2(1j * ky * psi_hat).real
    v = torch.fft.ifft2(-1j * kx * psi_hat).real
    wx = torch.fft.ifft2(1j * kx * w_hat).real
    wy = torch.fft.ifft2(1j * ky * w_hat).real
    adv_hat = torch.fft.fft2(u * wx + v * wy) * dealias
    w_hat = ((1 - 0.5 * DT * NU * lap) * w_hat + DT * (forcing_hat - adv_hat)) / (1 + 0.5 * DT * NU * lap)
    if step % EVERY == EVERY - 1:
        snapshots.append(torch.fft.ifft2(w_hat).real)
if device == "cuda":
    print(
        f"solve {len(snapshots)} snapshots peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
X = torch.stack(snapshots, dim=1).reshape(B, len(snapshots), -1)
X = X - X.mean(dim=1, keepdim=True)
gram = X @ X.transpose(1, 2)
evals, evecs = torch.linalg.eigh(gram)
top = evals.flip(-1)[:, :4].clamp_min(1e-12).sqrt()
modes = torch.einsum("bts,btm->bms", X, evecs.flip(-1)[..., :4]) / top[..., None]
if device == "cuda":
    print(
        f"pod energy {(evals[:, -1] / evals.sum(-1)).mean().item():.3f} modes {tuple(modes.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
