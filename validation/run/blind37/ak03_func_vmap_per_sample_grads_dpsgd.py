"""DP-SGD by hand with torch.func: per-sample gradients of an MLP classifier from
vmap(grad(loss)) over functional_call, each clipped to norm 1, summed, noised and averaged into
.grad, then SGD; fp32, batch 128, 1024-wide inputs, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3703)
B, D, W, C = (8, 16, 32, 10) if SMALL else (128, 1024, 2048, 100)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(D, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, C)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
params = {k: v.detach() for k, v in model.named_parameters()}


def loss_one(p, x, y):
    out = functional_call(model, p, (x.unsqueeze(0),))
    return F.cross_entropy(out, y.unsqueeze(0))


per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, C, (B,), device=device)
    grads = per_sample(params, x, y)
    norms = torch.stack([g.reshape(B, -1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)
    factor = (1.0 / (norms + 1e-6)).clamp(max=1.0)
    for name, p in model.named_parameters():
        g = grads[name]
        clipped = (g * factor.view(B, *([1] * (g.dim() - 1)))).sum(0)
        p.grad = (clipped + torch.randn_like(clipped) * 0.5) / B
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, grads, norms, factor, g, clipped
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
