"""DP-SGD written with torch.func: per-sample gradients of a small CNN by `vmap(grad(loss))` over
`functional_call`, each clipped to norm 1, summed, Gaussian noise added, written into `.grad` and
applied by SGD; batch 256 of 1x28x28 images, fp32, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4706)
B = 8 if SMALL else 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Conv2d(1, 32, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(),
    nn.Linear(64 * 7 * 7, 128),
    nn.ReLU(),
    nn.Linear(128, 10),
).to(device)
params = {k: v.detach() for k, v in model.named_parameters()}
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def loss_one(p, x, y):
    logits = functional_call(model, p, (x.unsqueeze(0),))
    return F.cross_entropy(logits, y.unsqueeze(0))


per_sample = vmap(grad(loss_one), in_dims=(None, 0, 0))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    grads = per_sample(params, x, y)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()], 1).norm(dim=1)
    scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)
    for name, p in model.named_parameters():
        g = grads[name]
        summed = (g * scale.view(-1, *([1] * (g.dim() - 1)))).sum(0)
        p.grad = (summed + torch.randn_like(summed) * 1.1) / B
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, grads, norms, scale, g, summed
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
