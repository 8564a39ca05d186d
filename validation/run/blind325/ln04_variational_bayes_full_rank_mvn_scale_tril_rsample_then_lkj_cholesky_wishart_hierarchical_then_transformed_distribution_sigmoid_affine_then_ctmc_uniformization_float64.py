"""Variational inference and probabilistic modelling with torch.distributions on the GPU:
a Bayesian logistic regression over 1,536 features with a full-rank Gaussian posterior
q = MultivariateNormal(loc, scale_tril) (a learned lower-triangular factor with a softplus diagonal),
ELBO from 64 reparameterized samples (rsample), an Independent Normal prior and the closed-form
kl_divergence; a hierarchical correlation model whose per-group covariance factor gets an LKJCholesky
prior, scored with MultivariateNormal(scale_tril=...) over grouped data, the groups' scatter matrices
then scored under a Wishart; bounded parameters via TransformedDistribution(Normal, [SigmoidTransform,
AffineTransform]) with log_abs_det_jacobian; and a continuous-time Markov chain likelihood in float64,
transition matrices by uniformization (a fixed number of powers of I + Q/lambda mixed with Poisson weights
from lgamma) over a batch of time gaps.

Phases: 0 data; 1 full-rank VI (25 Adam steps); 2 LKJ / MVN hierarchical MAP (25 steps) and Wishart
scores; 3 TransformedDistribution bounded parameters (25 steps);
4 CTMC uniformization likelihood fit (15 steps, float64)."""

import os

import torch
import torch.distributions as dist
import torch.nn.functional as F
from torch.distributions import transforms as T

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3254)
device = "cuda" if torch.cuda.is_available() else "cpu"
N, P, S = (2048, 64, 16) if SMALL else (65_536, 1536, 64)
G, K, NG = (8, 6, 32) if SMALL else (256, 24, 512)
NS, NT = (16, 512) if SMALL else (64, 200_000)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


X = torch.randn(N, P, device=device) / P**0.5
w_true = torch.randn(P, device=device) * 2
y = torch.bernoulli(torch.sigmoid(X @ w_true))
report("data")

# 1: full-rank Gaussian VI for Bayesian logistic regression
loc = torch.zeros(P, device=device, requires_grad=True)
raw_tril = torch.zeros(P, P, device=device)
raw_tril.fill_diagonal_(-2.0)
raw_tril.requires_grad_(True)
prior = dist.Independent(dist.Normal(torch.zeros(P, device=device), torch.ones(P, device=device)), 1)
opt = torch.optim.Adam([loc, raw_tril], lr=1e-2)
for _ in range(25):
    opt.zero_grad(set_to_none=True)
    L = torch.tril(raw_tril, -1) + torch.diag_embed(F.softplus(torch.diagonal(raw_tril)))
    q = dist.MultivariateNormal(loc, scale_tril=L)
    w = q.rsample((S,))
    loglik = -F.binary_cross_entropy_with_logits(w @ X.T, y.expand(S, N), reduction="none").sum(-1).mean()
    kl = dist.kl_divergence(q, dist.MultivariateNormal(prior.mean, scale_tril=torch.eye(P, device=device)))
    (-(loglik - kl) / N).backward()
    opt.step()
print(f"elbo per point {(loglik - kl).item() / N:.4f}")
del opt, q, w, L, loglik, kl
report("fullrank_vi")

# 2: hierarchical correlations: LKJ prior on per-group Cholesky factors, MVN likelihood, Wishart draws
true_corr = dist.LKJCholesky(K, concentration=2.0).sample((G,)).to(device)
data = dist.MultivariateNormal(torch.zeros(G, K, device=device), scale_tril=true_corr).sample((NG,))
unc = torch.zeros(G, K * (K - 1) // 2, device=device, requires_grad=True)
log_scale = torch.zeros(G, K, device=device, requires_grad=True)
to_chol = T.CorrCholeskyTransform()
lkj = dist.LKJCholesky(K, concentration=torch.tensor(2.0, device=device))
opt = torch.optim.Adam([unc, log_scale], lr=5e-2)
for _ in range(25):
    opt.zero_grad(set_to_none=True)
    Lc = to_chol(unc)
    scale_tril = log_scale.exp().unsqueeze(-1) * Lc
    lp = dist.MultivariateNormal(torch.zeros(G, K, device=device), scale_tril=scale_tril).log_prob(data).sum()
    lp = lp + lkj.log_prob(Lc).sum() + to_chol.log_abs_det_jacobian(unc, Lc).sum()
    (-lp).backward()
    opt.step()
with torch.no_grad():
    cov = scale_tril @ scale_tril.transpose(-1, -2)
    scatter = torch.einsum("ngi,ngj->gij", data, data)
    wish = dist.Wishart(df=torch.full((G,), float(NG), device=device), covariance_matrix=cov).log_prob(
        scatter
    )
print(f"hierarchical log posterior {lp.item():.2f}, mean Wishart log-density {wish.mean().item():.2f}")
del opt, Lc, scale_tril, lp, cov, scatter, wish, data
report("lkj_wishart")

# 3: bounded parameters through TransformedDistribution(Normal, sigmoid then affine to [0.1, 5])
mu_b = torch.zeros(P, device=device, requires_grad=True)
log_sd_b = torch.full((P,), -1.0, device=device, requires_grad=True)
opt = torch.optim.Adam([mu_b, log_sd_b], lr=2e-2)
target_rate = torch.rand(P, device=device) * 4 + 0.5
for _ in range(25):
    opt.zero_grad(set_to_none=True)
    qb = dist.TransformedDistribution(
        dist.Normal(mu_b, log_sd_b.exp()), [T.SigmoidTransform(), T.AffineTransform(loc=0.1, scale=4.9)]
    )
    rates = qb.rsample((NS,))
    counts = dist.Poisson(target_rate).sample((NS,))
    elbo = dist.Poisson(rates).log_prob(counts).sum(-1).mean() - qb.log_prob(rates).sum(-1).mean()
    (-elbo).backward()
    opt.step()
print(f"bounded-rate elbo {elbo.item():.3f}")
del opt, qb, rates, counts, elbo
report("transformed")

# 4: CTMC likelihood by uniformization in float64: P(dt) = sum_k Pois(k; lam dt) M^k, M = I + Q / lam
S_, KU = 16, 32
raw_q = torch.zeros(S_, S_, dtype=torch.float64, device=device, requires_grad=True)
dts = torch.rand(NT, dtype=torch.float64, device=device) * 2
frm = torch.randint(0, S_, (NT,), device=device)
to = torch.randint(0, S_, (NT,), device=device)
ks = torch.arange(KU, dtype=torch.float64, device=device)
eye = torch.eye(S_, dtype=torch.float64, device=device)
opt = torch.optim.Adam([raw_q], lr=5e-2)
CH = NT // 4
for _ in range(15):
    opt.zero_grad(set_to_none=True)
    rates = F.softplus(raw_q) * (1 - eye)
    Q = rates - torch.diag_embed(rates.sum(-1))
    lam = rates.sum(-1).amax() * 1.05
    M = eye + Q / lam
    powers = [eye]
    for _k in range(KU - 1):
        powers.append(powers[-1] @ M)
    Mpow = torch.stack(powers)
    nll = 0.0
    for s in range(0, NT, CH):
        ldt = lam * dts[s : s + CH, None]
        logw = ks * torch.log(ldt) - ldt - torch.lgamma(ks + 1)
        Pm = torch.einsum("nk,kij->nij", logw.exp(), Mpow)
        nll = (
            nll
            - Pm[torch.arange(Pm.shape[0], device=device), frm[s : s + CH], to[s : s + CH]]
            .clamp_min(1e-12)
            .log()
            .sum()
        )
    nll.backward()
    opt.step()
print(f"ctmc nll per transition {nll.item() / NT:.4f}")
report("ctmc_uniformization")
