"""An energy-based model trained by exact score matching (Hyvarinen 2005) with torch.func: a scalar
energy MLP over 32-dimensional data (4 layers of width 512, Softplus), its per-sample score and
Hessian from vmap(grad(...)) and vmap(hessian(...)) of functional_call, the loss
0.5 |grad E|^2 - tr(hess E) averaged over a batch of 1,024 points of a Gaussian mixture, the
parameters' gradients by an ordinary loss.backward() through the transforms, AdamW with a cosine
schedule, 4 steps, fp32; then 40 steps of unadjusted Langevin dynamics on 8,192 chains with the
score from vmap(grad(...)) under no_grad; 6 phases."""

import math
import os

import torch
import torch.nn as nn
from torch.func import functional_call, grad, hessian, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11304)
D, W, B, STEPS, CHAINS, LSTEPS = (8, 32, 32, 2, 64, 4) if SMALL else (32, 512, 1024, 4, 8192, 40)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Energy(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(D, W),
            nn.Softplus(),
            nn.Linear(W, W),
            nn.Softplus(),
            nn.Linear(W, W),
            nn.Softplus(),
            nn.Linear(W, W),
            nn.Softplus(),
            nn.Linear(W, 1),
        )

    def forward(self, x):
        return self.net(x).squeeze(-1)


model = Energy().to(device)
means = torch.randn(8, D, device=device) * 3


def sample_data(n):
    comp = torch.randint(0, 8, (n,), device=device)
    return means[comp] + torch.randn(n, D, device=device)


def energy_single(params, x):
    return functional_call(model, params, (x.unsqueeze(0),)).squeeze(0)


score_fn = vmap(grad(energy_single, argnums=1), in_dims=(None, 0))
hess_fn = vmap(hessian(energy_single, argnums=1), in_dims=(None, 0))
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-2)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    params = dict(model.named_parameters())
    x = sample_data(B)
    g = score_fn(params, x)
    h = hess_fn(params, x)
    loss = (0.5 * g.square().sum(-1) - h.diagonal(dim1=-2, dim2=-1).sum(-1)).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del params, x, g, h, loss
params = {k: v.detach() for k, v in model.named_parameters()}
eps = 1e-2
with torch.no_grad():
    x = torch.randn(CHAINS, D, device=device) * 4
    for _ in range(LSTEPS):
        x = x - 0.5 * eps * score_fn(params, x) + math.sqrt(eps) * torch.randn_like(x)
    nearest = torch.cdist(x, means).min(-1).values.mean()
if device == "cuda":
    print(
        f"langevin nearest {nearest.item():.3f} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
