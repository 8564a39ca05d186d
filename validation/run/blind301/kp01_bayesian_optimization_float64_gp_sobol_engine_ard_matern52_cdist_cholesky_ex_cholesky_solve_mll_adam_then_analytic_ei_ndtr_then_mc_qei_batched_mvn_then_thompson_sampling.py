"""Bayesian optimisation of a synthetic 12-D black box (a shifted Ackley function) with a hand-written
Gaussian process in float64 on the GPU, the recipe BoTorch automates, without BoTorch.

Phases: (1) initial design: 4,096 scrambled Sobol points (`torch.quasirandom.SobolEngine`, drawn on the
host in float64 and moved to the device), the objective evaluated there with observation noise, targets
standardised; (2) type-II maximum likelihood: an ARD Matern-5/2 kernel (lengthscales, outputscale, noise
and a constant mean, positive ones through softplus) built from `torch.cdist` of the scaled inputs,
`torch.linalg.cholesky_ex` of K + noise I, `torch.cholesky_solve` for alpha, the log determinant from the
factor's diagonal, 40 Adam steps on the negative marginal log likelihood; (3) acquisition: analytic
expected improvement (`torch.special.ndtr`, the standard normal's density from `Normal.log_prob`) of 1,024
raw Sobol points under no_grad, the best 64 as restarts optimised by 30 Adam steps through a sigmoid
reparametrisation of the unit box (posterior variance from `torch.linalg.solve_triangular` of the cached
factor); (4) Monte-Carlo q-EI for batches of q = 8: 32 candidate batches (the cached 4,096-row factor
broadcast against their cross-covariances in solve_triangular), joint 8 x 8 posterior covariances (batched
cholesky), `MultivariateNormal(scale_tril=...)` rsample of 512 fantasies, 20 Adam steps; (5) Thompson
sampling: the joint posterior of 3,072 Sobol candidates (a 3,072 x 3,072 covariance, cholesky with
jitter), 16 sample paths and their argmax, then the GP refitted for 10 steps on the 4,096 + 8 + 16 points."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import MultivariateNormal, Normal
from torch.quasirandom import SobolEngine

torch.manual_seed(30101)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float64
DIM, N0, RAW, RESTARTS, Q, QBATCH, MC, TS_CAND, TS_PATHS = 12, 4096, 1024, 64, 8, 32, 512, 3072, 16


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


SHIFT = torch.rand(DIM, dtype=dtype) * 4 - 2


def black_box(x):
    z = 15 * x - 5 - SHIFT.to(x.device)
    a = -20 * torch.exp(-0.2 * torch.sqrt((z**2).mean(-1)))
    b = -torch.exp(torch.cos(2 * math.pi * z).mean(-1))
    return -(a + b + 20 + math.e)


class MaternGP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.zeros(dim, dtype=dtype))
        self.raw_outputscale = nn.Parameter(torch.zeros((), dtype=dtype))
        self.raw_noise = nn.Parameter(torch.full((), -4.0, dtype=dtype))
        self.constant = nn.Parameter(torch.zeros((), dtype=dtype))

    def outputscale(self):
        return F.softplus(self.raw_outputscale)

    def kernel(self, a, b):
        ls = F.softplus(self.raw_lengthscale) + 1e-3
        r = torch.cdist(a / ls, b / ls)
        s5r = math.sqrt(5.0) * r
        return self.outputscale() * (1 + s5r + s5r**2 / 3) * torch.exp(-s5r)

    def factor(self, x, y):
        n = x.shape[0]
        noise = F.softplus(self.raw_noise) + 1e-6
        K = self.kernel(x, x) + noise * torch.eye(n, dtype=dtype, device=x.device)
        L, _info = torch.linalg.cholesky_ex(K)
        resid = (y - self.constant).unsqueeze(-1)
        alpha = torch.cholesky_solve(resid, L)
        return L, alpha, resid

    def neg_mll(self, x, y):
        L, alpha, resid = self.factor(x, y)
        n = x.shape[0]
        mll = (
            -0.5 * (resid * alpha).sum()
            - torch.log(torch.diagonal(L)).sum()
            - 0.5 * n * math.log(2 * math.pi)
        )
        return -mll / n

    def posterior(self, L, alpha, x, xs, full_cov=False):
        Ks = self.kernel(xs, x)
        mean = self.constant + (Ks @ alpha).squeeze(-1)
        V = torch.linalg.solve_triangular(L, Ks.transpose(-1, -2), upper=False)
        if full_cov:
            cov = self.kernel(xs, xs) - V.transpose(-1, -2) @ V
            return mean, cov
        var = (self.outputscale() - (V * V).sum(-2)).clamp_min(1e-12)
        return mean, var


def fit(gp, x, y, steps, lr):
    opt = torch.optim.Adam(gp.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = gp.neg_mll(x, y)
        loss.backward()
        opt.step()
    return loss.item()


def expected_improvement(mean, var, best):
    sigma = var.sqrt()
    z = (mean - best) / sigma
    pdf = torch.exp(Normal(0.0, 1.0).log_prob(z))
    return sigma * (z * torch.special.ndtr(z) + pdf)


sobol = SobolEngine(dimension=DIM, scramble=True, seed=30101)

# phase 1: initial design
x = sobol.draw(N0, dtype=dtype).to(device)
f = black_box(x)
y_raw = f + 0.05 * torch.randn_like(f)
y_mean, y_std = y_raw.mean(), y_raw.std()
y = (y_raw - y_mean) / y_std
print(f"initial best {f.max().item():.4f}")
report("phase 1 initial design")

# phase 2: type-II maximum likelihood
gp = MaternGP(DIM).to(device)
loss = fit(gp, x, y, 40, 0.05)
print(f"neg mll {loss:.4f} noise {F.softplus(gp.raw_noise).item():.2e}")
report("phase 2 gp fit")

# phase 3: analytic EI with restarts
with torch.no_grad():
    L, alpha, _ = gp.factor(x, y)
    best = y.max()
    raw = sobol.draw(RAW, dtype=dtype).to(device)
    mean, var = gp.posterior(L, alpha, x, raw)
    ei = expected_improvement(mean, var, best)
    starts = raw[ei.topk(RESTARTS).indices]
u = torch.logit(starts.clamp(1e-4, 1 - 1e-4)).requires_grad_(True)
opt = torch.optim.Adam([u], lr=0.05)
for p in gp.parameters():
    p.requires_grad_(False)
for _ in range(30):
    opt.zero_grad(set_to_none=True)
    mean, var = gp.posterior(L, alpha, x, torch.sigmoid(u))
    loss = -expected_improvement(mean, var, best).sum()
    loss.backward()
    opt.step()
print(f"best EI {-loss.item() / RESTARTS:.4e}")
report("phase 3 analytic ei")

# phase 4: Monte-Carlo q-EI over batches of q points
uq = torch.logit(torch.rand(QBATCH, Q, DIM, dtype=dtype, device=device).clamp(1e-4, 1 - 1e-4)).requires_grad_(
    True
)
opt = torch.optim.Adam([uq], lr=0.05)
eye_q = torch.eye(Q, dtype=dtype, device=device)
for _ in range(20):
    opt.zero_grad(set_to_none=True)
    mean, cov = gp.posterior(L, alpha, x, torch.sigmoid(uq), full_cov=True)
    scale_tril = torch.linalg.cholesky(cov + 1e-6 * eye_q)
    fantasies = MultivariateNormal(mean, scale_tril=scale_tril).rsample((MC,))
    qei = (fantasies.max(-1).values - best).clamp_min(0).mean(0)
    loss = -qei.sum()
    loss.backward()
    opt.step()
with torch.no_grad():
    q_points = torch.sigmoid(uq[qei.argmax()])
print(f"best qEI {qei.max().item():.4e}")
report("phase 4 mc qei")

# phase 5: Thompson sampling, then refit on the augmented data
with torch.no_grad():
    cand = sobol.draw(TS_CAND, dtype=dtype).to(device)
    mean, cov = gp.posterior(L, alpha, x, cand, full_cov=True)
    Lc = torch.linalg.cholesky(cov + 1e-6 * torch.eye(TS_CAND, dtype=dtype, device=device))
    paths = mean.unsqueeze(-1) + Lc @ torch.randn(TS_CAND, TS_PATHS, dtype=dtype, device=device)
    ts_points = cand[paths.argmax(0)]
    new_x = torch.cat([q_points, ts_points])
    new_y = (
        black_box(new_x) + 0.05 * torch.randn(new_x.shape[0], dtype=dtype, device=device) - y_mean
    ) / y_std
    x = torch.cat([x, new_x])
    y = torch.cat([y, new_y])
    del L, alpha, cov, Lc, paths
for p in gp.parameters():
    p.requires_grad_(True)
loss = fit(gp, x, y, 10, 0.02)
print(f"refit neg mll {loss:.4f} best so far {(y.max() * y_std + y_mean).item():.4f} n={x.shape[0]}")
report("phase 5 thompson sampling and refit")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
