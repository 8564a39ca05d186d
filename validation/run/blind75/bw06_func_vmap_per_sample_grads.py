"""Per-sample gradients with torch.func: `vmap(grad(loss))` over a 4-layer MLP (2,048 wide) with
`functional_call` on detached parameters, batch 256, fp32; the per-sample gradients' norms clipped
and averaged by hand (DP-SGD style) into an SGD update, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7506)
B, D, H, C = (4, 16, 32, 10) if SMALL else (256, 1024, 2048, 100)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Linear(D, H), nn.GELU(), nn.Linear(H, H), nn.GELU(), nn.Linear(H, H), nn.GELU(), nn.Linear(H, C)
).to(device)
params = {k: v.detach() for k, v in model.named_parameters()}


def loss_one(p, x, y):
    out = functional_call(model, p, (x.unsqueeze(0),))
    return F.cross_entropy(out, y.unsqueeze(0))


per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, D, device=device)
    y = torch.randint(0, C, (B,), device=device)
    grads = per_sample(params, x, y)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()], dim=1).norm(dim=1)
    scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)
    with torch.no_grad():
        for k, g in grads.items():
            params[k] -= 0.1 * (g * scale.view(-1, *([1] * (g.dim() - 1)))).mean(0)
    del x, y, grads, norms, scale
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
