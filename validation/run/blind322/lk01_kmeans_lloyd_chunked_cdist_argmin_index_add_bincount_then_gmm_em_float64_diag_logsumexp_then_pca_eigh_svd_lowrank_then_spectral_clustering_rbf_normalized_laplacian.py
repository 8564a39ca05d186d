"""Classic clustering and dimensionality reduction written directly with tensors, no nn.Module:
Lloyd's k-means over 1M points in 64 dimensions with the point-to-centroid distances computed in chunks
(torch.cdist + argmin per 131072-point chunk, assignments written into a preallocated long tensor with
out=), centroid update with index_add_ and bincount(minlength=K); a diagonal-covariance Gaussian mixture
fitted by EM in float64 (log densities, logsumexp responsibilities, weighted moments by matmul);
PCA of the data by eigh of the covariance and by torch.svd_lowrank / linalg.svd of a centered sample;
spectral clustering of a 4096-point subsample (RBF affinity from cdist, symmetric normalized Laplacian,
eigh, row-normalized eigenvectors then a small k-means), all fixed iteration counts.

Phases: 0 data generated; 1 k-means (10 iterations, fp32, chunked); 2 GMM EM (8 iterations, float64);
3 PCA (covariance eigh, svd_lowrank, full svd of a sample); 4 spectral clustering."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3221)
device = "cuda" if torch.cuda.is_available() else "cpu"
N, D, K, CHUNK = (4096, 16, 8, 1024) if SMALL else (1_000_000, 64, 64, 131072)
NS = 512 if SMALL else 4096


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


# Data: a mixture of K blobs
true_centers = torch.randn(K, D, device=device) * 4.0
labels_true = torch.randint(0, K, (N,), device=device)
X = true_centers[labels_true] + torch.randn(N, D, device=device)
del labels_true
report("data")


def kmeans(points, k, iters, chunk):
    centers = points[torch.randperm(points.shape[0], device=points.device)[:k]].clone()
    assign = torch.empty(points.shape[0], dtype=torch.long, device=points.device)
    for _ in range(iters):
        for s in range(0, points.shape[0], chunk):
            d = torch.cdist(points[s : s + chunk], centers)
            torch.argmin(d, dim=1, out=assign[s : s + chunk])
        sums = torch.zeros_like(centers).index_add_(0, assign, points)
        counts = torch.bincount(assign, minlength=k).clamp_(min=1).unsqueeze(1)
        centers = sums / counts
    return centers, assign


centers, assign = kmeans(X, K, 10, CHUNK)
inertia = 0.0
for s in range(0, N, CHUNK):
    inertia += (X[s : s + CHUNK] - centers[assign[s : s + CHUNK]]).pow(2).sum().item()
print(f"kmeans inertia {inertia / N:.3f}")
report("kmeans")

# GMM EM with diagonal covariances in float64, initialized from k-means
X64 = X.double()
mu = centers.double()
var = torch.ones(K, D, dtype=torch.float64, device=device)
logw = torch.full((K,), -torch.log(torch.tensor(float(K))).item(), dtype=torch.float64, device=device)
for _ in range(8):
    # log N(x | mu_k, diag var_k) = -0.5 * sum((x - mu)^2 / var + log var + log 2pi)
    prec = 1.0 / var
    quad = (X64 * X64) @ prec.T - 2.0 * X64 @ (mu * prec).T + (mu * mu * prec).sum(1)
    logp = -0.5 * (quad + torch.log(var).sum(1) + D * torch.log(torch.tensor(2 * torch.pi)).item())
    logp += logw
    lse = torch.logsumexp(logp, dim=1, keepdim=True)
    resp = torch.exp(logp - lse)
    nk = resp.sum(0) + 1e-10
    mu = (resp.T @ X64) / nk[:, None]
    var = (resp.T @ (X64 * X64)) / nk[:, None] - mu * mu + 1e-6
    logw = torch.log(nk / N)
    del quad, logp, resp
print(f"gmm loglik {lse.mean().item():.4f}")
del X64, lse
report("gmm")

# PCA: covariance eigh, randomized low rank, full svd of a sample
mean = X.mean(0, keepdim=True)
Xc = X - mean
cov = (Xc.T @ Xc) / (N - 1)
evals, evecs = torch.linalg.eigh(cov)
proj = Xc @ evecs[:, -8:]
U, S, V = torch.svd_lowrank(Xc, q=16, niter=2)
sample = Xc[torch.randperm(N, device=device)[:NS]]
Us, Ss, Vhs = torch.linalg.svd(sample, full_matrices=False)
print(f"pca top eig {evals[-1].item():.3f} lowrank {S[0].item():.3f} sample {Ss[0].item():.3f}")
del Xc, proj, U, V, sample, Us, Vhs
report("pca")

# Spectral clustering on a subsample
sub = X[torch.randperm(N, device=device)[:NS]]
dist2 = torch.cdist(sub, sub).pow_(2)
sigma2 = dist2.median()
A = torch.exp(-dist2 / sigma2)
A.fill_diagonal_(0.0)
deg = A.sum(1)
dinv = deg.rsqrt()
L = torch.eye(NS, device=device) - dinv[:, None] * A * dinv[None, :]
ev, vec = torch.linalg.eigh(L)
emb = vec[:, :K]
emb = emb / emb.norm(dim=1, keepdim=True).clamp_min(1e-12)
sc_centers, sc_assign = kmeans(emb, K, 20, NS)
print(f"spectral cluster sizes {torch.bincount(sc_assign, minlength=K).max().item()}")
report("spectral")
