"""Per-sample gradients as DP-SGD computes them: torch.func.vmap over torch.func.grad of a functional_call
of a small CNN (two convolutions, GroupNorm, a linear head), per-sample clipping by the gradients' norms,
noise added, and the mean written to .grad for SGD; fp32, batch 64 at 32x32, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
BATCH, CH = (4, 8) if SMALL else (64, 64)
torch.manual_seed(1307)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Conv2d(3, CH, 3, padding=1),
    nn.GroupNorm(8, CH),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(CH, 2 * CH, 3, padding=1),
    nn.GroupNorm(8, 2 * CH),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(4),
    nn.Flatten(),
    nn.Linear(2 * CH * 16, 10),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def loss_of(params, x, y):
    out = functional_call(model, params, (x.unsqueeze(0),))
    return F.cross_entropy(out, y.unsqueeze(0))


per_sample = vmap(grad(loss_of), in_dims=(None, 0, 0))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (BATCH,), device=device)
    params = {k: v.detach() for k, v in model.named_parameters()}
    grads = per_sample(params, x, y)
    norms = torch.stack([g.reshape(BATCH, -1).norm(dim=1) for g in grads.values()]).norm(dim=0)
    scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)
    for name, p in model.named_parameters():
        g = grads[name]
        clipped = (g * scale.view(-1, *([1] * (g.dim() - 1)))).sum(0)
        p.grad = (clipped + torch.randn_like(clipped) * 0.5) / BATCH
    del grads
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
