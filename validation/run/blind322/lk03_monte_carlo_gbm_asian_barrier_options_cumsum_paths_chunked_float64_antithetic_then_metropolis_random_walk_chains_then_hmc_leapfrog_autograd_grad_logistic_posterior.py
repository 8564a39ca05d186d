"""Monte Carlo and MCMC with plain tensors: pricing a European call, an arithmetic Asian call and an
up-and-out barrier call under geometric Brownian motion (log-price paths by cumsum of normal
increments, 2M paths x 252 steps in 4 chunks of 512K paths, antithetic variates, fp32), then the
European price again in float64 with a control variate (one 1M-path batch, covariance by hand);
then random-walk Metropolis on a 50-dimensional correlated Gaussian (4096 chains in parallel,
Cholesky factor, log-density by triangular solve, accept/reject by torch.where, fixed 300 steps);
then Hamiltonian Monte Carlo on a Bayesian logistic regression posterior (200k x 100 design matrix,
256 chains, gradients by torch.autograd.grad, 10 leapfrog steps per proposal, 20 proposals).

Phases: 0 setup; 1 fp32 path simulation in chunks (three payoffs); 2 float64 control variate;
3 Metropolis chains; 4 HMC with autograd."""

import math
import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3223)
device = "cuda" if torch.cuda.is_available() else "cpu"
NPATH, NCHUNK, STEPS = (8192, 2, 16) if SMALL else (2_097_152, 4, 252)
N64 = 4096 if SMALL else 1_048_576
CHAINS, DIM = (64, 10) if SMALL else (4096, 50)
NOBS, P, HCH = (2048, 20, 8) if SMALL else (200_000, 100, 256)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


S0, K, B, r, sigma, T = 100.0, 100.0, 130.0, 0.03, 0.25, 1.0
dt = T / STEPS
drift = (r - 0.5 * sigma**2) * dt
vol = sigma * math.sqrt(dt)
disc = math.exp(-r * T)
report("setup")

sums = torch.zeros(3, device=device)
per = NPATH // NCHUNK
for _ in range(NCHUNK):
    z = torch.randn(per // 2, STEPS, device=device)
    z = torch.cat([z, -z], 0)  # antithetic
    logs = torch.cumsum(z.mul_(vol).add_(drift), dim=1).add_(math.log(S0))
    paths = torch.exp(logs)
    euro = torch.clamp(paths[:, -1] - K, min=0.0)
    asian = torch.clamp(paths.mean(1) - K, min=0.0)
    alive = (paths.amax(1) < B).float()
    barrier = euro * alive
    sums += torch.stack([euro.sum(), asian.sum(), barrier.sum()])
    del z, logs, paths
prices = sums * disc / NPATH
print(f"prices euro {prices[0].item():.3f} asian {prices[1].item():.3f} barrier {prices[2].item():.3f}")
report("paths")

z = torch.randn(N64, dtype=torch.float64, device=device)
ST = S0 * torch.exp((r - 0.5 * sigma**2) * T + sigma * math.sqrt(T) * z)
Y = torch.clamp(ST - K, min=0.0) * disc
Xcv = ST
cov = ((Y - Y.mean()) * (Xcv - Xcv.mean())).mean()
beta = cov / Xcv.var()
Ycv = Y - beta * (Xcv - S0 * math.exp(r * T))
print(f"cv price {Ycv.mean().item():.4f} se {Ycv.std().item() / math.sqrt(N64):.5f}")
del z, ST, Y, Xcv, Ycv
report("control_variate")

A = torch.randn(DIM, DIM, device=device) / math.sqrt(DIM)
Sigma = A @ A.T + 0.5 * torch.eye(DIM, device=device)
Lc = torch.linalg.cholesky(Sigma)


def log_target(x):
    y = torch.linalg.solve_triangular(Lc, x.T, upper=False)
    return -0.5 * (y * y).sum(0)


x = torch.zeros(CHAINS, DIM, device=device)
lp = log_target(x)
accepted = torch.zeros(CHAINS, device=device)
samples = torch.empty(300, CHAINS, DIM, device=device)
for t in range(300):
    prop = x + 0.3 * torch.randn_like(x)
    lp_prop = log_target(prop)
    acc = torch.log(torch.rand(CHAINS, device=device)) < (lp_prop - lp)
    x = torch.where(acc[:, None], prop, x)
    lp = torch.where(acc, lp_prop, lp)
    accepted += acc.float()
    samples[t] = x
emp_cov = torch.cov(samples[100:].reshape(-1, DIM).T)
print(f"mh acceptance {accepted.mean().item() / 300:.3f} cov err {(emp_cov - Sigma).abs().max().item():.3f}")
del samples, emp_cov
report("metropolis")

Xd = torch.randn(NOBS, P, device=device)
w_true = torch.randn(P, device=device) * 0.5
yd = torch.bernoulli(torch.sigmoid(Xd @ w_true))


def neg_log_post(w):
    logits = Xd @ w.T  # (NOBS, chains)
    ll = -torch.nn.functional.binary_cross_entropy_with_logits(
        logits, yd[:, None].expand_as(logits), reduction="none"
    ).sum(0)
    return -(ll - 0.5 * (w * w).sum(1))


def grad_U(w):
    w = w.detach().requires_grad_(True)
    U = neg_log_post(w)
    (g,) = torch.autograd.grad(U.sum(), w)
    return U.detach(), g


w = torch.zeros(HCH, P, device=device)
eps, L = 2e-3, 10
U, g = grad_U(w)
n_acc = torch.zeros(HCH, device=device)
for _ in range(20):
    p0 = torch.randn_like(w)
    wn, p = w.clone(), p0 - 0.5 * eps * g
    for i in range(L):
        wn = wn + eps * p
        Un, gn = grad_U(wn)
        if i < L - 1:
            p = p - eps * gn
    p = p - 0.5 * eps * gn
    H0 = U + 0.5 * (p0 * p0).sum(1)
    H1 = Un + 0.5 * (p * p).sum(1)
    acc = torch.rand(HCH, device=device).log() < (H0 - H1)
    w = torch.where(acc[:, None], wn, w)
    U = torch.where(acc, Un, U)
    g = torch.where(acc[:, None], gn, g)
    n_acc += acc.float()
print(f"hmc acceptance {n_acc.mean().item() / 20:.3f} w err {(w.mean(0) - w_true).norm().item():.3f}")
report("hmc")
