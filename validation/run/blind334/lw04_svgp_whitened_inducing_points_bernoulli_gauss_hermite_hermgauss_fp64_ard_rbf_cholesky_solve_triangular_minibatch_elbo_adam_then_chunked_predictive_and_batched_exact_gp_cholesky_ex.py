"""Sparse variational Gaussian-process classification (SVGP, Hensman, Matthews & Ghahramani 2015) written by
hand in float64, as one does without GPyTorch: 1024 inducing points Z (learned) in 16-D, the whitened
variational posterior q(v) = N(m, L L^T) with L the lower triangle of a square parameter (`torch.tril`,
a softplus'd diagonal), an ARD RBF kernel from squared distances by expansion, K_zz's Cholesky
(`torch.linalg.cholesky`, jitter 1e-6), A = L_zz^{-1} K_zx by `torch.linalg.solve_triangular`, marginal means
and variances of f, the Bernoulli log-likelihood's expectation under N(mu, var) by 20-point Gauss-Hermite
quadrature (`numpy.polynomial.hermite.hermgauss`, moved to the GPU), KL(q(v) || N(0, I)) in closed form, and
the minibatch ELBO scaled by N / B. Adam on Z, m, L, log lengthscales and log variance.

Phases: 0 data (200,000 points, labels from a hidden function) and parameters; 1 the first ELBO step
(batch 4096); 2 five more steps; 3 no_grad predictive class probabilities for 65,536 test points in chunks
of 8192; 4 an exact GP regression baseline on 6144 points for 4 lengthscale candidates at once (batched
(4, 6144, 6144) kernels, `torch.linalg.cholesky_ex`, `torch.cholesky_solve`, log marginal likelihoods)."""

import math

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(3344)
dev = "cuda"
D, M, N, B = 16, 1024, 200_000, 4096
f64 = dict(dtype=torch.float64, device=dev)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def rbf(a, b, log_ls, log_var):
    a, b = a / log_ls.exp(), b / log_ls.exp()
    sq = a.pow(2).sum(-1)[..., :, None] + b.pow(2).sum(-1)[..., None, :] - 2 * a @ b.transpose(-1, -2)
    return log_var.exp()[..., None, None] * torch.exp(-0.5 * sq.clamp_min(0))


X = torch.randn(N, D, **f64)
w_true = torch.randn(D, **f64)
y = torch.where(torch.sin(X @ w_true) + 0.3 * X[:, 0] * X[:, 1] > 0, 1.0, -1.0).to(torch.float64)
Z = torch.nn.Parameter(X[torch.randperm(N, device=dev)[:M]].clone())
m = torch.nn.Parameter(torch.zeros(M, **f64))
L_raw = torch.nn.Parameter(torch.eye(M, **f64) * math.log(math.e - 1))  # softplus^-1(1) on the diagonal
log_ls = torch.nn.Parameter(torch.full((D,), math.log(2.0), **f64))
log_var = torch.nn.Parameter(torch.tensor(0.0, **f64))
nodes, weights = np.polynomial.hermite.hermgauss(20)
gh_x = torch.as_tensor(nodes, **f64)
gh_w = torch.as_tensor(weights, **f64) / math.sqrt(math.pi)
opt = torch.optim.Adam([Z, m, L_raw, log_ls, log_var], lr=1e-2)
eye = torch.eye(M, **f64)
report("setup")


def q_chol():
    return torch.tril(L_raw, -1) + torch.diag_embed(F.softplus(torch.diagonal(L_raw)))


def marginals(xb):
    Kzz = rbf(Z, Z, log_ls, log_var) + 1e-6 * eye
    Lzz = torch.linalg.cholesky(Kzz)
    A = torch.linalg.solve_triangular(Lzz, rbf(Z, xb, log_ls, log_var), upper=False)
    L = q_chol()
    mu = A.transpose(0, 1) @ m
    var = log_var.exp() - A.pow(2).sum(0) + (L.transpose(0, 1) @ A).pow(2).sum(0)
    return mu, var.clamp_min(1e-10), L


def elbo(xb, yb):
    mu, var, L = marginals(xb)
    f = mu[:, None] + math.sqrt(2.0) * var.sqrt()[:, None] * gh_x[None]
    ell = (F.logsigmoid(yb[:, None] * f) * gh_w).sum(-1)
    diag = torch.diagonal(L)
    kl = 0.5 * (L.pow(2).sum() + m.pow(2).sum() - M - 2 * diag.log().sum())
    return N / xb.shape[0] * ell.sum() - kl


perm = torch.randperm(N, device=dev)
for step in range(6):
    idx = perm[step * B : (step + 1) * B]
    loss = -elbo(X[idx], y[idx]) / N
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} -elbo/N {loss.item():.4f}")
    del loss
    if step == 0:
        report("first_elbo_step")
report("elbo_steps")

with torch.no_grad():
    Xt = torch.randn(65536, D, **f64)
    probs = []
    for chunk in Xt.split(8192):
        mu, var, _ = marginals(chunk)
        f = mu[:, None] + math.sqrt(2.0) * var.sqrt()[:, None] * gh_x[None]
        probs.append((torch.sigmoid(f) * gh_w).sum(-1))
    probs = torch.cat(probs)
print(f"predictive mean prob {probs.mean().item():.4f}")
report("predictive")

with torch.no_grad():
    n = 6144
    Xs, ys = X[:n], (torch.sin(X[:n] @ w_true) + 0.1 * torch.randn(n, **f64))
    cand = torch.log(torch.tensor([0.5, 1.0, 2.0, 4.0], **f64))[:, None, None].expand(4, 1, D)
    K = rbf(Xs.expand(4, n, D), Xs.expand(4, n, D), cand, torch.zeros(4, **f64))
    K.diagonal(dim1=-2, dim2=-1).add_(0.01)
    Lk, info = torch.linalg.cholesky_ex(K)
    alpha = torch.cholesky_solve(ys.expand(4, n)[..., None], Lk)
    lml = (
        -0.5 * (ys[None, :, None] * alpha).sum((-2, -1))
        - torch.diagonal(Lk, dim1=-2, dim2=-1).log().sum(-1)
        - 0.5 * n * math.log(2 * math.pi)
    )
    del K
print(f"exact GP lml {lml.cpu().tolist()} info {info.cpu().tolist()}")
report("exact_gp")
