"""A ZCA-whitened MLP trained with K-FAC (Martens & Grosse 2015, written by hand) and a closed-form
ridge readout: the input layer whitens 512-dimensional features with the batch covariance's
torch.linalg.eigh (gradient through the eigendecomposition, as in decorrelated batch norm); three
hidden linear layers of 2,048 whose K-FAC factors (activation and pre-activation-gradient
covariances, 2,048 x 2,048) are damped and inverted every other step, one by torch.linalg.cholesky_ex
+ cholesky_inverse and the other by torch.linalg.lu_factor + lu_solve against the identity; the
natural-gradient update G^-1 grad A^-1; batch 4,096, fp32, 4 steps with SGD; then the readout fitted
in closed form by torch.linalg.lstsq (driver gels) on 16,384 features, checked with torch.linalg.pinv
and torch.linalg.solve_ex on the normal equations, and a last step with the fitted readout; 7 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11706)
DIN, H, NCLS, B, STEPS, NFIT = (16, 32, 5, 64, 2, 128) if SMALL else (512, 2048, 200, 4096, 4, 16384)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Whiten(nn.Module):
    def forward(self, x):
        xc = x - x.mean(0)
        cov = xc.T @ xc / x.size(0) + 1e-3 * torch.eye(x.size(1), device=x.device)
        evals, evecs = torch.linalg.eigh(cov)
        return xc @ (evecs * evals.rsqrt()) @ evecs.T


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.white = Whiten()
        self.fcs = nn.ModuleList([nn.Linear(DIN, H), nn.Linear(H, H), nn.Linear(H, H)])
        self.out = nn.Linear(H, NCLS)

    def features(self, x, keep=None):
        h = self.white(x)
        for fc in self.fcs:
            if keep is not None:
                keep.append(h)
            z = fc(h)
            if keep is not None:
                z.retain_grad()
                keep.append(z)
            h = torch.tanh(z)
        return h

    def forward(self, x, keep=None):
        return self.out(self.features(x, keep))


net = Net().to(device)
opt = torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9)
inv_a = [None] * 3
inv_g = [None] * 3


def damped_inv_chol(M, damp):
    L, _info = torch.linalg.cholesky_ex(M + damp * torch.eye(M.size(0), device=M.device))
    return torch.cholesky_inverse(L)


def damped_inv_lu(M, damp):
    eye = torch.eye(M.size(0), device=M.device)
    LU, piv = torch.linalg.lu_factor(M + damp * eye)
    return torch.linalg.lu_solve(LU, piv, eye)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    x = torch.randn(B, DIN, device=device) @ torch.randn(DIN, DIN, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    keep = []
    loss = F.cross_entropy(net(x, keep), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for i, fc in enumerate(net.fcs):
            a, z = keep[2 * i], keep[2 * i + 1]
            if step % 2 == 0:
                A = a.T @ a / B
                G = z.grad.T @ z.grad * B
                inv_a[i] = damped_inv_chol(A, 1e-2)
                inv_g[i] = damped_inv_lu(G, 1e-2)
            fc.weight.grad.copy_(inv_g[i] @ fc.weight.grad @ inv_a[i])
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, keep, loss

with torch.no_grad():
    x = torch.randn(NFIT, DIN, device=device)
    y = torch.randint(0, NCLS, (NFIT,), device=device)
    feats = torch.cat([net.features(x), torch.ones(NFIT, 1, device=device)], 1)
    target = F.one_hot(y, NCLS).float()
    sol = torch.linalg.lstsq(feats, target, driver="gels" if device == "cuda" else None).solution
if device == "cuda":
    print(
        f"lstsq {tuple(sol.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    sol2 = torch.linalg.pinv(feats) @ target
    gram = feats.T @ feats + 1e-3 * torch.eye(H + 1, device=device)
    sol3, info = torch.linalg.solve_ex(gram, feats.T @ target)
    agree = (sol2 - sol).abs().max() + (sol3 - sol).abs().max()
    net.out.weight.copy_(sol[:-1].T)
    net.out.bias.copy_(sol[-1])
if device == "cuda":
    print(
        f"pinv/solve_ex {agree.item():.3e} info {int(info)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del feats, target, sol2, gram, sol3

x = torch.randn(B, DIN, device=device)
y = torch.randint(0, NCLS, (B,), device=device)
loss = F.cross_entropy(net(x), y)
opt.zero_grad(set_to_none=True)
loss.backward()
opt.step()
if device == "cuda":
    print(
        f"final {loss.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
