"""Per-sample gradients (as DP-SGD computes them) with torch.func: vmap over grad of a
functional_call, an MLP of 784-1024-1024-10 in fp32, batches of 256, each sample's gradient
clipped to norm 1 and the mean added to .grad by hand, SGD, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2802)
B, W = (4, 32) if SMALL else (256, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(nn.Linear(784, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, 10)).to(device)
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
    x = torch.randn(B, 784, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    grads = per_sample(params, x, y)
    norms = torch.stack([g.reshape(B, -1).norm(dim=1) for g in grads.values()]).norm(dim=0)
    scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)
    for name, p in model.named_parameters():
        g = grads[name]
        p.grad = (g * scale.view(-1, *([1] * (g.dim() - 1)))).mean(0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, grads, norms, scale, g
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
