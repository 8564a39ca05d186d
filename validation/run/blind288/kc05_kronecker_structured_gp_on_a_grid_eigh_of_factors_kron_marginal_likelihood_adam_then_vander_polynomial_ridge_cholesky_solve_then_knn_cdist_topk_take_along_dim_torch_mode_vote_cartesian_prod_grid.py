"""Classical statistics on the GPU with PyTorch's tensor ops, fp32 unless noted, synthetic and seeded.
Phase 1, a Kronecker-structured Gaussian process (Saatci 2012) on a 384 x 320 image grid (122,880
noisy observations of a smooth field): the RBF kernel factorises as K = K1 (x) K2 over the grid's axes
(`torch.cartesian_prod` builds the grid's coordinates for the field), so the exact marginal likelihood
comes from `torch.linalg.eigh` of the two factors: eigenvalues `torch.kron(l1, l2)`, the solve by
Q1^T Y Q2 rotations; 12 Adam steps on the two lengthscales, the signal and noise variances (autograd
through eigh), then the posterior mean on the grid. A 24 x 20 corner is checked against a dense
`torch.kron(K1, K2)` Cholesky solve (float64).
Phase 2, polynomial ridge regression: 3,000,000 rows of 6 features, a degree-10 `torch.vander`
expansion per feature (increasing=True, 76 columns with the pairwise products of the linear terms), the
normal equations X^T X in chunks of 500,000, `torch.linalg.cholesky` + `torch.cholesky_solve`, the
held-out RMSE.
Phase 3, k-nearest-neighbour classification: 400,000 reference points (32-d, 10 classes), 20,000
queries in chunks of 2,000: `torch.cdist`, `topk(15, largest=False)`, the neighbours' labels by
`torch.take_along_dim`, the majority vote by `torch.mode(dim=1)`, then distance-weighted votes by
`scatter_add_` for comparison.
3 phases."""

import torch

torch.manual_seed(2885)
dev = "cuda"
N1, N2 = 384, 320


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# --- phase 1: Kronecker GP --------------------------------------------------------------------------------
g1 = torch.linspace(0, 1, N1, device=dev)
g2 = torch.linspace(0, 1, N2, device=dev)
pts = torch.cartesian_prod(g1, g2)  # (N1*N2, 2), row-major as the grid
field = torch.sin(7 * pts[:, 0]) * torch.cos(5 * pts[:, 1]) + 0.5 * torch.sin(11 * pts[:, 0] * pts[:, 1])
Y = (field + 0.2 * torch.randn_like(field)).view(N1, N2)


def rbf(x, ls):
    return torch.exp(-0.5 * (x[:, None] - x[None, :]).pow(2) / ls**2)


raw = torch.tensor([-1.5, -1.5, 0.0, -2.0], device=dev, requires_grad=True)  # log ls1, ls2, sf2, sn2
opt = torch.optim.Adam([raw], lr=0.05)
n = N1 * N2
for step in range(12):
    ls1, ls2, sf2, sn2 = raw.exp().unbind()
    l1, q1 = torch.linalg.eigh(rbf(g1, ls1) + 1e-5 * torch.eye(N1, device=dev))
    l2, q2 = torch.linalg.eigh(rbf(g2, ls2) + 1e-5 * torch.eye(N2, device=dev))
    lam = sf2 * torch.kron(l1.clamp_min(0), l2.clamp_min(0)) + sn2  # (n,)
    rot = q1.T @ Y @ q2  # (Q1 (x) Q2)^T y as a matrix
    alpha_rot = rot.reshape(-1) / lam
    nll = 0.5 * (rot.reshape(-1) * alpha_rot).sum() + 0.5 * lam.log().sum() + 0.5 * n * 1.8378770664
    opt.zero_grad(set_to_none=True)
    (nll / n).backward()
    opt.step()
    if step % 4 == 3:
        print(
            "gp step",
            step + 1,
            "nll/n",
            round((nll / n).item(), 5),
            [round(v, 4) for v in raw.exp().tolist()],
        )
with torch.no_grad():
    ls1, ls2, sf2, sn2 = raw.exp().unbind()
    l1, q1 = torch.linalg.eigh(rbf(g1, ls1) + 1e-5 * torch.eye(N1, device=dev))
    l2, q2 = torch.linalg.eigh(rbf(g2, ls2) + 1e-5 * torch.eye(N2, device=dev))
    lam = sf2 * torch.kron(l1.clamp_min(0), l2.clamp_min(0))
    alpha = q1 @ ((q1.T @ Y @ q2) / (lam + sn2).view(N1, N2)) @ q2.T
    mean = q1 @ ((q1.T @ alpha @ q2) * lam.view(N1, N2)) @ q2.T
    print("posterior rmse vs field", round((mean.reshape(-1) - field).pow(2).mean().sqrt().item(), 5))
    c1, c2 = g1[:24].double(), g2[:20].double()
    kd = torch.kron(rbf(c1, ls1.double()), rbf(c2, ls2.double())) * sf2.double()
    kd = kd + sn2.double() * torch.eye(kd.shape[0], device=dev, dtype=torch.float64)
    yd = Y[:24, :20].reshape(-1, 1).double()
    ad = torch.cholesky_solve(yd, torch.linalg.cholesky(kd))
    print("dense corner alpha norm", round(ad.norm().item(), 4))
del pts, field, Y, mean, alpha
report("kronecker_gp_eigh_marginal_likelihood")

# --- phase 2: polynomial ridge via vander ------------------------------------------------------------------
NR, F_, DEG, CH = 3_000_000, 6, 10, 500_000
wx = torch.randn(F_, DEG + 1, device=dev) * torch.logspace(0, -3, DEG + 1, device=dev)


def features(x):
    parts = [torch.vander(x[:, j], N=DEG + 1, increasing=True) for j in range(F_)]
    cols = [parts[0]] + [p[:, 1:] for p in parts[1:]]  # one shared intercept
    iu = torch.triu_indices(F_, F_, 1, device=dev)
    cols.append(x[:, iu[0]] * x[:, iu[1]])
    return torch.cat(cols, dim=1)


xr = torch.rand(NR, F_, device=dev) * 2 - 1
yr = sum(torch.vander(xr[:, j], N=DEG + 1, increasing=True) @ wx[j] for j in range(F_)) + 0.05 * torch.randn(
    NR, device=dev
)
xtx, xty = None, None
for c in range(0, NR, CH):
    fx = features(xr[c : c + CH])
    a, b = fx.T @ fx, fx.T @ yr[c : c + CH]
    xtx = a if xtx is None else xtx + a
    xty = b if xty is None else xty + b
del fx
reg = xtx + 1e-3 * torch.eye(xtx.shape[0], device=dev)
coef = torch.cholesky_solve(xty[:, None], torch.linalg.cholesky(reg)).squeeze(1)
xh = torch.rand(500_000, F_, device=dev) * 2 - 1
yh = sum(torch.vander(xh[:, j], N=DEG + 1, increasing=True) @ wx[j] for j in range(F_))
print("ridge columns", xtx.shape[0], "rmse", round((features(xh) @ coef - yh).pow(2).mean().sqrt().item(), 5))
del xr, yr, xh, yh
report("vander_polynomial_ridge_cholesky_solve")

# --- phase 3: kNN with take_along_dim and torch.mode ----------------------------------------------------
NREF, NQ, DIM, K, C = 400_000, 20_000, 32, 15, 10
centers = torch.randn(C, DIM, device=dev) * 2
ref_y = torch.randint(0, C, (NREF,), device=dev)
ref_x = centers[ref_y] + torch.randn(NREF, DIM, device=dev) * 1.5
q_y = torch.randint(0, C, (NQ,), device=dev)
q_x = centers[q_y] + torch.randn(NQ, DIM, device=dev) * 1.5
acc_mode, acc_w = 0, 0
for c in range(0, NQ, 2_000):
    d = torch.cdist(q_x[c : c + 2_000], ref_x)  # (2000, NREF)
    dist, idx = d.topk(K, dim=1, largest=False)
    lab = torch.take_along_dim(ref_y[None, :].expand(idx.shape[0], -1), idx, dim=1)  # (2000, K)
    vote, _ = torch.mode(lab, dim=1)
    w = torch.zeros(idx.shape[0], C, device=dev).scatter_add_(1, lab, 1.0 / (dist + 1e-6))
    acc_mode += (vote == q_y[c : c + 2_000]).sum().item()
    acc_w += (w.argmax(1) == q_y[c : c + 2_000]).sum().item()
    del d
print("knn majority acc", acc_mode / NQ, "weighted acc", acc_w / NQ)
report("knn_cdist_topk_take_along_dim_mode")
