"""An exact Gaussian process fitted by its marginal likelihood in float64: an RBF kernel over 4096
points in 8 dimensions (torch.cdist), a learned lengthscale, outputscale and noise, Cholesky of
K + noise*I (torch.linalg.cholesky), cholesky_solve and the log-determinant from the factor's
diagonal; Adam on the three hyperparameters, 3 steps; 4 phases."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3204)
N, D = (64, 2) if SMALL else (4096, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"
X = torch.randn(N, D, device=device, dtype=torch.float64)
y = torch.sin(X.sum(dim=1, keepdim=True))
raw = torch.zeros(3, device=device, dtype=torch.float64, requires_grad=True)
optimizer = torch.optim.Adam([raw], lr=0.05)
eye = torch.eye(N, device=device, dtype=torch.float64)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ls, os_, noise = torch.nn.functional.softplus(raw).unbind()
    K = os_ * torch.exp(-0.5 * torch.cdist(X / ls, X / ls).pow(2)) + (noise + 1e-4) * eye
    L = torch.linalg.cholesky(K)
    alpha = torch.cholesky_solve(y, L)
    nll = 0.5 * (y * alpha).sum() + L.diagonal().log().sum()
    nll.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del K, L, alpha, nll
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
