"""Exact Gaussian-process regression with 16 independent output tasks, each its own ARD RBF kernel
over 8 input features (GPyTorch-style, written by hand): 16 batched 2,048 x 2,048 fp64 kernel
matrices, torch.linalg.cholesky_ex (info checked once), the marginal log-likelihood from
cholesky_solve and the Cholesky diagonal's log, Adam on log-lengthscales, log-outputscales and
log-noises for 4 steps with backward through the factorisation; then predictive means and variances
at 4,096 test points (solve_triangular) under no_grad, and a posterior draw of 8 joint samples at 512
points via cholesky of the posterior covariance; 6 phases."""

import math
import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11701)
T, N, D, NT, NS, STEPS = (2, 64, 3, 32, 16, 2) if SMALL else (16, 2048, 8, 4096, 512, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"
dt = torch.float64

X = torch.rand(N, D, device=device, dtype=dt)
w = torch.randn(T, D, device=device, dtype=dt)
Y = torch.sin(3 * X @ w.T).T + 0.1 * torch.randn(T, N, device=device, dtype=dt)
Xt = torch.rand(NT, D, device=device, dtype=dt)

log_ls = torch.zeros(T, 1, D, device=device, dtype=dt, requires_grad=True)
log_os = torch.zeros(T, 1, 1, device=device, dtype=dt, requires_grad=True)
log_noise = torch.full((T, 1), -2.0, device=device, dtype=dt, requires_grad=True)
opt = torch.optim.Adam([log_ls, log_os, log_noise], lr=0.05)


def kernel(a, b):
    ls = log_ls.exp()
    d2 = torch.cdist(a / ls, b / ls).pow(2)
    return log_os.exp() * torch.exp(-0.5 * d2)


def mll():
    K = kernel(X.expand(T, N, D), X.expand(T, N, D))
    K = K + torch.diag_embed(log_noise.exp().expand(T, N))
    L, info = torch.linalg.cholesky_ex(K)
    alpha = torch.cholesky_solve(Y.unsqueeze(-1), L)
    fit = (Y.unsqueeze(-1) * alpha).sum((-1, -2))
    logdet = 2 * L.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    return -0.5 * (fit + logdet + N * math.log(2 * math.pi)).sum() / (T * N), info


if device == "cuda":
    print(f"data {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    opt.zero_grad(set_to_none=True)
    m, info = mll()
    (-m).backward()
    opt.step()
    if step == 0:
        assert int(info.max()) == 0
    if device == "cuda":
        print(
            f"step {step} mll {m.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del m, info

with torch.no_grad():
    K = kernel(X.expand(T, N, D), X.expand(T, N, D)) + torch.diag_embed(log_noise.exp().expand(T, N))
    L = torch.linalg.cholesky(K)
    del K
    alpha = torch.cholesky_solve(Y.unsqueeze(-1), L)
    Ks = kernel(X.expand(T, N, D), Xt.expand(T, NT, D))
    mean = (Ks.transpose(-1, -2) @ alpha).squeeze(-1)
    V = torch.linalg.solve_triangular(L, Ks, upper=False)
    var = log_os.exp().squeeze(-1) - V.pow(2).sum(-2)
    del Ks, V
if device == "cuda":
    print(
        f"predict mean {mean.abs().mean().item():.4f} var {var.mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    Xs = Xt[:NS]
    Ks = kernel(X.expand(T, N, D), Xs.expand(T, NS, D))
    Kss = kernel(Xs.expand(T, NS, D), Xs.expand(T, NS, D))
    V = torch.linalg.solve_triangular(L, Ks, upper=False)
    cov = Kss - V.transpose(-1, -2) @ V + 1e-6 * torch.eye(NS, device=device, dtype=dt)
    Lp, info = torch.linalg.cholesky_ex(cov)
    mu = (Ks.transpose(-1, -2) @ alpha).squeeze(-1)
    draws = mu.unsqueeze(1) + (Lp.unsqueeze(1) @ torch.randn(T, 8, NS, 1, device=device, dtype=dt)).squeeze(
        -1
    )
if device == "cuda":
    print(
        f"posterior draws {tuple(draws.shape)} bad {int((info > 0).sum())}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
