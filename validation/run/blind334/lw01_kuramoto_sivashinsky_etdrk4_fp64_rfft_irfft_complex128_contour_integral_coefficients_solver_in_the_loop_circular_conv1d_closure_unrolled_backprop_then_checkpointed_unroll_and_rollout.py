"""Solver-in-the-loop learned closure (Um et al. 2020) for the 1-D Kuramoto-Sivashinsky equation
u_t = -u u_x - u_xx - u_xxxx on [0, 32 pi), periodic, written by hand in plain PyTorch: the ETDRK4 scheme of
Kassam & Trefethen (2005) in float64, its coefficients (E, E/2, Q, f1, f2, f3) computed on the GPU by the
contour-integral mean over 32 complex points (complex128 `torch.exp`, `.real`), the nonlinear term
-0.5 i k FFT(u^2) through `torch.fft.rfft`/`irfft` (complex128 spectra). A fine solver (N = 512, h = 0.05)
makes reference trajectories; the coarse solver (N = 128, h = 0.2) runs on their spectrally truncated
initial states, and after each coarse step a small circular-padded Conv1d network (float32, its input cast
down and its correction cast back up to float64) adds a correction. Training unrolls the coarse solver with
the network in the loop and backpropagates through all of it (complex128 FFT gradients).

Phases: 0 ETDRK4 coefficients and fine-solver data (no_grad, burn-in then 48 recorded frames); 1 closure
network, Adam and the first unrolled step (16 coarse steps, batch 256); 2 three more steps, unroll 32, each
coarse step under `torch.utils.checkpoint` (non-reentrant); 3 no_grad rollout of 128 coarse steps from 1024
fresh states with the energy spectrum accumulated from `rfft(...).abs() ** 2`."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(3341)
dev = "cuda"
LENGTH = 32 * math.pi


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class ETDRK4:
    def __init__(self, n, h, contour_points=32):
        k = torch.fft.rfftfreq(n, d=LENGTH / (2 * math.pi * n), dtype=torch.float64, device=dev)
        k[-1] = 0.0  # odd derivative of the Nyquist mode
        lin = k**2 - k**4
        self.n = n
        self.E = torch.exp(h * lin).to(torch.complex128)
        self.E2 = torch.exp(h * lin / 2).to(torch.complex128)
        j = torch.arange(1, contour_points + 1, dtype=torch.float64, device=dev)
        r = torch.exp(1j * math.pi * (j - 0.5) / contour_points)
        lr = h * lin.to(torch.complex128)[:, None] + r[None, :]
        self.Q = (h * ((torch.exp(lr / 2) - 1) / lr).mean(-1).real).to(torch.complex128)
        ex = torch.exp(lr)
        self.f1 = (h * ((-4 - lr + ex * (4 - 3 * lr + lr**2)) / lr**3).mean(-1).real).to(torch.complex128)
        self.f2 = (h * ((2 + lr + ex * (-2 + lr)) / lr**3).mean(-1).real).to(torch.complex128)
        self.f3 = (h * ((-4 - 3 * lr - lr**2 + ex * (4 - lr)) / lr**3).mean(-1).real).to(torch.complex128)
        self.g = -0.5j * k.to(torch.complex128)

    def nonlinear(self, v):
        return self.g * torch.fft.rfft(torch.fft.irfft(v, n=self.n) ** 2)

    def step_hat(self, v):
        nv = self.nonlinear(v)
        a = self.E2 * v + self.Q * nv
        na = self.nonlinear(a)
        b = self.E2 * v + self.Q * na
        nb = self.nonlinear(b)
        c = self.E2 * a + self.Q * (2 * nb - nv)
        nc = self.nonlinear(c)
        return self.E * v + nv * self.f1 + 2 * (na + nb) * self.f2 + nc * self.f3

    def step(self, u):
        return torch.fft.irfft(self.step_hat(torch.fft.rfft(u)), n=self.n)


def truncate(u, n):
    """Spectral truncation of fields (..., N) to n points."""
    uh = torch.fft.rfft(u)[..., : n // 2 + 1] * (n / u.shape[-1])
    return torch.fft.irfft(uh, n=n)


def random_states(batch, n):
    x = torch.arange(n, dtype=torch.float64, device=dev) * LENGTH / n
    modes = torch.arange(1, 9, dtype=torch.float64, device=dev)
    amp = torch.randn(batch, 8, 1, dtype=torch.float64, device=dev) / modes[:, None]
    phase = torch.rand(batch, 8, 1, dtype=torch.float64, device=dev) * 2 * math.pi
    return (amp * torch.cos(modes[:, None] * x * 2 * math.pi / LENGTH + phase)).sum(1)


class Closure(nn.Module):
    def __init__(self, width=64, layers=4):
        super().__init__()
        chans = [1] + [width] * layers
        self.convs = nn.ModuleList(
            nn.Conv1d(chans[i], chans[i + 1], 5, padding=2, padding_mode="circular") for i in range(layers)
        )
        self.out = nn.Conv1d(width, 1, 5, padding=2, padding_mode="circular")

    def forward(self, u):
        h = u.float()[:, None]
        for conv in self.convs:
            h = F.gelu(conv(h))
        return 0.05 * self.out(h)[:, 0].double()


fine, coarse = ETDRK4(512, 0.05), ETDRK4(128, 0.2)
with torch.no_grad():
    u = random_states(1024, 512)
    for _ in range(300):
        u = fine.step(u)
    frames = [truncate(u, 128)]
    for _ in range(48):
        for _ in range(4):
            u = fine.step(u)
        frames.append(truncate(u, 128))
    data = torch.stack(frames, 1)  # (1024, 49, 128) float64
    del frames, u
print(f"data {tuple(data.shape)} rms {data.pow(2).mean().sqrt().item():.3f}")
report("data")

net = Closure().to(dev)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)


def coarse_step(u):
    return coarse.step(u) + net(u)


def train_step(batch_idx, unroll, use_checkpoint):
    traj = data[batch_idx]
    u = traj[:, 0]
    loss = 0.0
    for t in range(1, unroll + 1):
        u = checkpoint(coarse_step, u, use_reentrant=False) if use_checkpoint else coarse_step(u)
        loss = loss + F.mse_loss(u, traj[:, t])
    loss = loss / unroll
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    return loss.item()


idx = torch.randperm(1024, device=dev)
print(f"step 0 loss {train_step(idx[:256], 16, False):.5f}")
report("first_step")

for s in range(1, 4):
    print(f"step {s} loss {train_step(idx[256 * s : 256 * (s + 1)], 32, True):.5f}")
report("checkpointed_steps")

with torch.no_grad():
    u = truncate(random_states(1024, 512), 128)
    spectrum = torch.zeros(65, dtype=torch.float64, device=dev)
    for _ in range(128):
        u = coarse_step(u)
        spectrum += torch.fft.rfft(u).abs().pow(2).mean(0)
    spectrum /= 128
print(f"rollout energy {spectrum.sum().item():.4f} low-k {spectrum[1:6].sum().item():.4f}")
report("rollout")
