"""Variational quantum eigensolver on a 22-qubit statevector simulator written in plain torch
(complex64): a hardware-efficient ansatz of 4 layers of RY and RZ rotations (2 x 2 gates applied by
einsum on a reshaped state) and a ring of CZ phases (diagonals built from arange bit masks), the
energy of a transverse-field Ising ring (ZZ from |psi|^2 on bit-parity diagonals, X by index_select
on arange ^ mask); Adam on the 176 angles for 3 steps, then 8,192 measurement shots drawn with
torch.multinomial from a seeded CUDA generator and their magnetisation; 4 phases."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10505)
N, LAYERS, SHOTS = (8, 2, 64) if SMALL else (22, 4, 8192)
J, H = 1.0, 0.7
device = "cuda" if torch.cuda.is_available() else "cpu"
DIM = 2**N
index = torch.arange(DIM, device=device)
bits = [((index >> (N - 1 - q)) & 1) for q in range(N)]
signs = [(1 - 2 * b).to(torch.float32) for b in bits]
cz_ring = torch.ones(DIM, device=device)
for q in range(N):
    cz_ring = cz_ring * (1 - 2 * (bits[q] & bits[(q + 1) % N])).to(torch.float32)
zz = sum(signs[q] * signs[(q + 1) % N] for q in range(N))
flips = [index ^ (1 << (N - 1 - q)) for q in range(N)]
theta = torch.nn.Parameter(0.1 * torch.randn(LAYERS, N, 2, device=device))
opt = torch.optim.Adam([theta], lr=0.05)


def apply_1q(psi, q, u):
    psi3 = psi.view(2**q, 2, 2 ** (N - q - 1))
    return torch.einsum("ab,ibj->iaj", u, psi3).reshape(DIM)


def circuit(theta):
    psi = torch.zeros(DIM, dtype=torch.complex64, device=device)
    psi[0] = 1.0
    for layer in range(LAYERS):
        for q in range(N):
            a, b = theta[layer, q, 0] / 2, theta[layer, q, 1] / 2
            c, s = torch.cos(a), torch.sin(a)
            ry = torch.stack([torch.stack([c, -s]), torch.stack([s, c])]).to(torch.complex64)
            psi = apply_1q(psi, q, ry)
            phase = torch.polar(torch.ones(2, device=device), torch.stack([-b, b]))
            psi = (psi.view(2**q, 2, 2 ** (N - q - 1)) * phase.view(1, 2, 1)).reshape(DIM)
        psi = psi * cz_ring
    return psi


def energy(psi):
    prob = psi.real**2 + psi.imag**2
    e_zz = (prob * zz).sum()
    e_x = sum((psi.conj() * psi.index_select(0, f)).real.sum() for f in flips)
    return -J * e_zz - H * e_x


if device == "cuda":
    print(f"setup {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    e = energy(circuit(theta))
    opt.zero_grad(set_to_none=True)
    e.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} energy {e.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del e
gen = torch.Generator(device=device)
gen.manual_seed(105)
with torch.no_grad():
    psi = circuit(theta)
    prob = (psi.abs() ** 2).float()
    shots = torch.multinomial(prob, SHOTS, replacement=True, generator=gen)
    outcome = (shots[:, None] >> torch.arange(N - 1, -1, -1, device=device)) & 1
    magnetisation = (1 - 2 * outcome).float().mean()
if device == "cuda":
    print(
        f"shots {magnetisation.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
