"""MAML meta-learning: a 4-block conv net, for each of 8 tasks one inner SGD step on fast weights
from torch.autograd.grad(create_graph=True) and torch.func.functional_call, the query losses summed
and back-propagated through the inner steps (second order), Adam as the outer optimizer, fp32,
5-way 5-shot at 84x84, 2 meta-steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4504)
TASKS, SHOT, QUERY, HW, C = (2, 1, 2, 28, 8) if SMALL else (8, 5, 15, 84, 64)
WAYS = 5
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin):
    return nn.Sequential(nn.Conv2d(cin, C, 3, padding=1), nn.BatchNorm2d(C), nn.ReLU(), nn.MaxPool2d(2))


model = nn.Sequential(block(3), block(C), block(C), block(C), nn.Flatten(), nn.LazyLinear(WAYS)).to(device)
model(torch.zeros(1, 3, HW, HW, device=device))
outer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    meta_loss = 0
    for _ in range(TASKS):
        xs = torch.randn(WAYS * SHOT, 3, HW, HW, device=device)
        ys = torch.arange(WAYS, device=device).repeat_interleave(SHOT)
        xq = torch.randn(WAYS * QUERY, 3, HW, HW, device=device)
        yq = torch.arange(WAYS, device=device).repeat_interleave(QUERY)
        params = dict(model.named_parameters())
        inner = F.cross_entropy(functional_call(model, params, (xs,)), ys)
        grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
        fast = {n: p - 0.01 * g for (n, p), g in zip(params.items(), grads, strict=True)}
        meta_loss = meta_loss + F.cross_entropy(functional_call(model, fast, (xq,)), yq)
    (meta_loss / TASKS).backward()
    outer.step()
    outer.zero_grad(set_to_none=True)
    del meta_loss, inner, grads, fast, params, xs, ys, xq, yq
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
