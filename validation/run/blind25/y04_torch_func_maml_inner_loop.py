"""MAML with torch.func: an MLP's parameters as a dict, an inner loop of 3 SGD steps taken with
torch.func.grad over functional_call on a support set (the graph kept: create_graph through the
inner updates), the query loss backpropagated to the meta-parameters, Adam; 16 tasks of 256 support
and 256 query points, 512 wide, 4 layers, 3 meta-steps; 4 phases."""

import os

import torch
import torch.nn as nn
from torch.func import functional_call, grad

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2504)
TASKS, N, W, DEPTH = (2, 8, 16, 2) if SMALL else (16, 256, 512, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"
layers, width = [], 64
for _ in range(DEPTH):
    layers += [nn.Linear(width, W), nn.ReLU()]
    width = W
model = nn.Sequential(*layers, nn.Linear(W, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def loss_fn(params, x, y):
    return nn.functional.mse_loss(functional_call(model, params, (x,)), y)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    meta = dict(model.named_parameters())
    total = 0.0
    for _ in range(TASKS):
        xs, ys = torch.randn(N, 64, device=device), torch.randn(N, 1, device=device)
        xq, yq = torch.randn(N, 64, device=device), torch.randn(N, 1, device=device)
        fast = meta
        for _ in range(3):
            g = grad(loss_fn)(fast, xs, ys)
            fast = {k: fast[k] - 0.01 * g[k] for k in fast}
        total = total + loss_fn(fast, xq, yq)
    (total / TASKS).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
