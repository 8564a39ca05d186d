"""Optimal control of a 2-D Gross-Pitaevskii (nonlinear Schrodinger) equation solved by the
Strang split-step Fourier method in complex64: a batch of 8 condensates on a 384x384 grid (fft2 and
ifft2 of complex fields, the kinetic phase built from fftfreq wave numbers, a cubic nonlinearity),
a learnable control potential optimised by Adam through 120 differentiable time steps towards a
displaced target state (loss from complex overlaps); then 600 steps without gradients under
torch.inference_mode with energy and norm diagnostics every 100 steps; 3 phases."""

import math
import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10003)
if SMALL:
    N, B, STEPS, LONG = 32, 2, 6, 20
else:
    N, B, STEPS, LONG = 384, 8, 120, 600
device = "cuda" if torch.cuda.is_available() else "cpu"
L, DT, G = 20.0, 0.005, 50.0
x = torch.linspace(-L / 2, L / 2, N + 1, device=device)[:-1]
X, Y = torch.meshgrid(x, x, indexing="ij")
k = 2 * math.pi * torch.fft.fftfreq(N, d=L / N, device=device)
KX, KY = torch.meshgrid(k, k, indexing="ij")
kinetic_phase = torch.exp(-0.5j * DT * (KX**2 + KY**2))
trap = 0.5 * (X**2 + Y**2)
dx2 = (L / N) ** 2


def normalise(psi):
    norm = (psi.abs() ** 2).sum(dim=(-2, -1), keepdim=True) * dx2
    return psi / norm.sqrt()


def ground(shift):
    r2 = (X - shift) ** 2 + Y**2
    return normalise(torch.exp(-r2 / 2).to(torch.complex64).expand(B, N, N).clone())


def step(psi, potential):
    half = torch.exp(-0.5j * DT * (potential + G * psi.abs() ** 2))
    psi = half * psi
    psi = torch.fft.ifft2(kinetic_phase * torch.fft.fft2(psi))
    return torch.exp(-0.5j * DT * (potential + G * psi.abs() ** 2)) * psi


def energy(psi, potential):
    psi_k = torch.fft.fft2(psi)
    kin = (0.5 * (KX**2 + KY**2) * psi_k.abs() ** 2).sum(dim=(-2, -1)) * dx2 / (N * N)
    pot = ((potential + 0.5 * G * psi.abs() ** 2) * psi.abs() ** 2).sum(dim=(-2, -1)) * dx2
    return kin + pot


control = torch.zeros(N, N, device=device, requires_grad=True)
opt = torch.optim.Adam([control], lr=0.05)
psi0 = ground(0.0)
target = ground(1.5)
if device == "cuda":
    print(f"setup {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for it in range(2):
    psi = psi0
    potential = trap + control
    for _ in range(STEPS):
        psi = step(psi, potential)
    overlap = (target.conj() * psi).sum(dim=(-2, -1)) * dx2
    loss = 1 - (overlap.abs() ** 2).mean() + 1e-4 * control.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"iter {it} fidelity loss {loss.item():.4f}")
    if device == "cuda":
        print(
            f"control {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del psi, potential, overlap, loss

with torch.inference_mode():
    potential = trap + control
    psi = psi0.clone()
    for t in range(LONG):
        psi = step(psi, potential)
        if (t + 1) % 100 == 0 or t + 1 == LONG:
            e = energy(psi, potential)
            norm = (psi.abs() ** 2).sum(dim=(-2, -1)) * dx2
            print(f"t {t + 1} energy {e.mean().item():.4f} norm {norm.mean().item():.5f}")
if device == "cuda":
    print(f"evolve peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
