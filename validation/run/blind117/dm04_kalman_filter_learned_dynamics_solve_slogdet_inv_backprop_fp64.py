"""A linear-Gaussian state-space model fitted by maximising the Kalman filter's likelihood (the
textbook predict/update recursion, batched over 2,048 independent series): a learned 24 x 24
transition, a 12 x 24 emission, process and observation noise as Cholesky factors; 64 time steps,
each innovation covariance S (12 x 12) handled by torch.linalg.solve for the gain, slogdet and a
solve for the Gaussian log-likelihood, the Joseph-form covariance update; fp64, backward through the
whole recursion, Adam, 3 steps; then an RTS smoother pass under no_grad with torch.linalg.inv of the
predicted covariances and a matrix_exp discretisation check; 5 phases."""

import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11704)
B, NX, NY, T, STEPS = (16, 4, 2, 8, 2) if SMALL else (2048, 24, 12, 64, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"
dt = torch.float64


class LGSSM(nn.Module):
    def __init__(self):
        super().__init__()
        self.A = nn.Parameter(0.9 * torch.eye(NX, dtype=dt) + 0.01 * torch.randn(NX, NX, dtype=dt))
        self.H = nn.Parameter(0.3 * torch.randn(NY, NX, dtype=dt))
        self.q = nn.Parameter(0.1 * torch.eye(NX, dtype=dt))
        self.r = nn.Parameter(0.3 * torch.eye(NY, dtype=dt))

    def noise(self):
        Lq = self.q.tril()
        Lr = self.r.tril()
        return Lq @ Lq.T + 1e-6 * torch.eye(NX, dtype=dt, device=Lq.device), Lr @ Lr.T

    def filter(self, y):
        Q, R = self.noise()
        eye = torch.eye(NX, dtype=dt, device=y.device)
        m = torch.zeros(B, NX, 1, dtype=dt, device=y.device)
        P = eye.expand(B, NX, NX)
        ll = 0.0
        ms, Ps, mps, Pps = [], [], [], []
        for t in range(T):
            mp = self.A @ m
            Pp = self.A @ P @ self.A.T + Q
            v = y[:, t].unsqueeze(-1) - self.H @ mp
            S = self.H @ Pp @ self.H.T + R
            K = torch.linalg.solve(S, self.H @ Pp).transpose(-1, -2)
            _, logdet = torch.linalg.slogdet(S)
            maha = (v * torch.linalg.solve(S, v)).sum((-1, -2))
            ll = ll - 0.5 * (maha + logdet + NY * math.log(2 * math.pi))
            m = mp + K @ v
            IKH = eye - K @ self.H
            P = IKH @ Pp @ IKH.transpose(-1, -2) + K @ R @ K.transpose(-1, -2)
            ms.append(m)
            Ps.append(P)
            mps.append(mp)
            Pps.append(Pp)
        return ll.mean() / T, ms, Ps, mps, Pps


A_true = torch.linalg.matrix_exp(0.05 * (torch.randn(NX, NX, dtype=dt) - torch.randn(NX, NX, dtype=dt).T))
H_true = torch.randn(NY, NX, dtype=dt)
xs = torch.randn(B, NX, 1, dtype=dt)
ys = []
for _ in range(T):
    xs = A_true @ xs + 0.1 * torch.randn(B, NX, 1, dtype=dt)
    ys.append((H_true @ xs).squeeze(-1) + 0.3 * torch.randn(B, NY, dtype=dt))
y = torch.stack(ys, 1).to(device)
model = LGSSM().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)

if device == "cuda":
    print(f"data {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    ll, *_ = model.filter(y)
    opt.zero_grad(set_to_none=True)
    (-ll).backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} ll {ll.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ll

with torch.no_grad():
    ll, ms, Ps, mps, Pps = model.filter(y)
    msm, Psm = ms[-1], Ps[-1]
    for t in range(T - 2, -1, -1):
        G = Ps[t] @ model.A.T @ torch.linalg.inv(Pps[t + 1])
        msm = ms[t] + G @ (msm - mps[t + 1])
        Psm = Ps[t] + G @ (Psm - Pps[t + 1]) @ G.transpose(-1, -2)
    gen = model.A - torch.eye(NX, dtype=dt, device=device)
    disc = torch.linalg.matrix_exp(gen.expand(B, NX, NX) * 0.1)
if device == "cuda":
    print(
        f"smoother ll {ll.item():.4f} trace {Psm.diagonal(dim1=-2, dim2=-1).sum(-1).mean().item():.4f}"
        f" expm {disc.abs().mean().item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
