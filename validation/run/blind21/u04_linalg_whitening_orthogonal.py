"""A whitening network in fp32: each block computes its batch covariance (x^T x / n), its eigh
(torch.linalg.eigh), whitens by the eigenvectors scaled by rsqrt of the eigenvalues, then a Linear
whose weight is parametrized orthogonal (nn.utils.parametrizations.orthogonal, its default map) and a
Cholesky-based solve (torch.linalg.cholesky, solve_triangular) against a learned SPD matrix; Adam,
batch 4096 x 512, 3 blocks, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2104)
N, W, DEPTH = (64, 16, 2) if SMALL else (4096, 512, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"


class WhitenBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.utils.parametrizations.orthogonal(nn.Linear(W, W))
        self.root = nn.Parameter(torch.eye(W) + 0.01 * torch.randn(W, W))

    def forward(self, x):
        xc = x - x.mean(0, keepdim=True)
        cov = xc.t() @ xc / x.shape[0] + 1e-3 * torch.eye(W, device=x.device)
        evals, evecs = torch.linalg.eigh(cov)
        white = (xc @ evecs) * evals.clamp_min(1e-5).rsqrt()
        y = self.proj(white)
        spd = self.root @ self.root.t() + torch.eye(W, device=x.device)
        chol = torch.linalg.cholesky(spd)
        z = torch.linalg.solve_triangular(chol, y.t(), upper=False).t()
        return x + torch.tanh(z)


model = nn.Sequential(*[WhitenBlock() for _ in range(DEPTH)], nn.Linear(W, 10)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(N, W, device=device)
    target = torch.randint(0, 10, (N,), device=device)
    loss = nn.functional.cross_entropy(model(x), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
