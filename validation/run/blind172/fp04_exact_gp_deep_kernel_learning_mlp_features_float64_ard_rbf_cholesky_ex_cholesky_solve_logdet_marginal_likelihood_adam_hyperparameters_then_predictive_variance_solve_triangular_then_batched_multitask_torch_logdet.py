"""Exact Gaussian-process regression with learned kernel hyperparameters, as a GPyTorch user writes
it by hand (deep kernel learning, Wilson et al. 2016): an MLP feature extractor (32 -> 1,000 -> 500 ->
50 -> 8, ReLU; fp32) whose features are cast to float64 and scaled by learned ARD lengthscales, an
RBF kernel with a learned outputscale plus learned Gaussian noise on the diagonal over N = 6,000
training points (softplus-constrained raw parameters), the exact negative marginal log likelihood
0.5 y^T K^-1 y + sum log diag L + N/2 log 2 pi from torch.linalg.cholesky_ex (jitter 1e-6) and
torch.cholesky_solve, back-propagated through the Cholesky; Adam (lr 0.01) on the network and the
hyperparameters, 8 iterations, the first its own phase; then the predictive mean and variance of
2,000 test points under no_grad (cross-covariance, cholesky_solve for the mean, solve_triangular for
the variance); then a batched multitask GP: 4 independent float64 RBF kernels over 2,500 points each
(one (4, 2,500, 2,500) batch) whose marginal likelihood uses torch.logdet and torch.linalg.solve,
3 Adam iterations. Phases: iteration 0, iterations 1-7, prediction, batched GP; 4 phases."""

import itertools
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17204)
if SMALL:
    N, N_TEST, D_IN, HID, FEAT, ITERS, TASKS, N_TASK = 64, 32, 8, (32, 16, 8), 4, 3, 2, 40
else:
    N, N_TEST, D_IN, HID, FEAT, ITERS, TASKS, N_TASK = 6000, 2000, 32, (1000, 500, 50), 8, 8, 4, 2500
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(17204)


class FeatureExtractor(nn.Sequential):
    def __init__(self):
        dims = (D_IN, *HID)
        layers = []
        for a, b in itertools.pairwise(dims):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], FEAT))
        super().__init__(*layers)


class DKLGP(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = FeatureExtractor()
        self.raw_lengthscale = nn.Parameter(torch.zeros(FEAT, dtype=torch.float64))
        self.raw_outputscale = nn.Parameter(torch.zeros((), dtype=torch.float64))
        self.raw_noise = nn.Parameter(torch.full((), -2.0, dtype=torch.float64))
        self.mean_const = nn.Parameter(torch.zeros((), dtype=torch.float64))

    def embed(self, x):
        z = self.features(x).double()
        return z / F.softplus(self.raw_lengthscale)

    def kernel(self, a, b):
        sq = (a.pow(2).sum(-1, keepdim=True) - 2 * a @ b.mT + b.pow(2).sum(-1, keepdim=True).mT).clamp_min(0)
        return F.softplus(self.raw_outputscale) * torch.exp(-0.5 * sq)

    def nmll(self, x, y):
        z = self.embed(x)
        K = self.kernel(z, z)
        K = K + (F.softplus(self.raw_noise) + 1e-6) * torch.eye(K.size(-1), dtype=K.dtype, device=K.device)
        L, _info = torch.linalg.cholesky_ex(K)
        r = (y - self.mean_const).unsqueeze(-1)
        alpha = torch.cholesky_solve(r, L)
        fit = 0.5 * (r * alpha).sum()
        logdet = torch.log(torch.diagonal(L)).sum()
        return (fit + logdet + 0.5 * N * math.log(2 * math.pi)) / N


def target(x):
    return (torch.sin(3 * x[:, 0]) + 0.5 * torch.cos(2 * x[:, 1]) * x[:, 2] + 0.1 * x[:, 3:].sum(1)).double()


x_train = torch.rand(N, D_IN, generator=gen).mul(2).sub(1).to(device)
y_train = (target(x_train.cpu()) + 0.05 * torch.randn(N, generator=gen, dtype=torch.float64)).to(device)
x_test = torch.rand(N_TEST, D_IN, generator=gen).mul(2).sub(1).to(device)
model = DKLGP().to(device)
opt = torch.optim.Adam(
    [
        dict(params=model.features.parameters(), weight_decay=1e-4),
        dict(params=[model.raw_lengthscale, model.raw_outputscale, model.raw_noise, model.mean_const]),
    ],
    lr=0.01,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for it in range(ITERS):
    opt.zero_grad()
    loss = model.nmll(x_train, y_train)
    loss.backward()
    opt.step()
    print(f"iter {it} nmll {loss.item():.4f} noise {F.softplus(model.raw_noise).item():.4f}")
    if device == "cuda" and it in (0, ITERS - 1):
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    z = model.embed(x_train)
    zs = model.embed(x_test)
    K = model.kernel(z, z)
    K.diagonal().add_(F.softplus(model.raw_noise) + 1e-6)
    L = torch.linalg.cholesky(K)
    Ks = model.kernel(z, zs)  # (N, N_TEST)
    alpha = torch.cholesky_solve((y_train - model.mean_const).unsqueeze(-1), L)
    mean = model.mean_const + (Ks.mT @ alpha).squeeze(-1)
    v = torch.linalg.solve_triangular(L, Ks, upper=False)
    var = F.softplus(model.raw_outputscale) - v.pow(2).sum(0) + F.softplus(model.raw_noise)
    rmse = (mean - target(x_test.cpu()).to(device)).pow(2).mean().sqrt()
    print(f"test rmse {rmse.item():.4f} mean var {var.mean().item():.4f}")
    del K, L, Ks, alpha, v
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

# batched multitask GP: independent RBF kernels per task over shared-size inputs, float64
xt = torch.rand(TASKS, N_TASK, 4, generator=gen, dtype=torch.float64).to(device)
yt = torch.sin(4 * xt).sum(-1) + 0.1 * torch.randn(TASKS, N_TASK, generator=gen, dtype=torch.float64).to(
    device
)
raw_ls = nn.Parameter(torch.zeros(TASKS, 1, 4, dtype=torch.float64, device=device))
raw_os = nn.Parameter(torch.zeros(TASKS, 1, 1, dtype=torch.float64, device=device))
raw_nz = nn.Parameter(torch.full((TASKS, 1, 1), -2.0, dtype=torch.float64, device=device))
opt2 = torch.optim.Adam([raw_ls, raw_os, raw_nz], lr=0.05)
eye = torch.eye(N_TASK, dtype=torch.float64, device=device)
for it in range(3):
    opt2.zero_grad()
    a = xt / F.softplus(raw_ls)
    sq = torch.cdist(a, a).pow(2)
    K = F.softplus(raw_os) * torch.exp(-0.5 * sq) + (F.softplus(raw_nz) + 1e-6) * eye
    alpha = torch.linalg.solve(K, yt.unsqueeze(-1))
    nmll = 0.5 * (yt.unsqueeze(-1) * alpha).sum((-2, -1)) + 0.5 * torch.logdet(K)
    loss = nmll.sum() / (TASKS * N_TASK)
    loss.backward()
    opt2.step()
    print(f"multitask iter {it} nmll {loss.item():.4f}")
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}")
