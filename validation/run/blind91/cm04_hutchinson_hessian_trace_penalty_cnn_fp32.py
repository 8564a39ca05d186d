"""Flat-minima training with a Hutchinson Hessian-trace penalty: a 6-conv CNN (64-256 channels,
BatchNorm, ReLU) on 64x64 images, fp32; each step takes the gradient with create_graph=True, draws
two Rademacher probes with torch.randint on the GPU, forms Hessian-vector products by a second
torch.autograd.grad (double backward) and adds 1e-3 times the trace estimate to the loss before
the final backward; SGD with Nesterov momentum, batch 64, 3 steps, then an eval pass; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9104)
B, R, W, C, PROBES = (4, 16, 8, 10, 1) if SMALL else (64, 64, 64, 100, 2)
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


model = nn.Sequential(
    block(3, W, 1),
    block(W, W, 1),
    block(W, 2 * W, 2),
    block(2 * W, 2 * W, 1),
    block(2 * W, 4 * W, 2),
    block(4 * W, 4 * W, 1),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(4 * W, C),
).to(device)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, C, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    grads = torch.autograd.grad(loss, params, create_graph=True)
    trace = 0.0
    for _ in range(PROBES):
        vs = [torch.randint_like(p, 0, 2) * 2 - 1 for p in params]
        hv = torch.autograd.grad(grads, params, grad_outputs=vs, create_graph=True)
        trace = trace + sum((h * v).sum() for h, v in zip(hv, vs, strict=True)) / PROBES
    total = loss + 1e-3 * trace
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} trace {float(trace):.2f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss, grads, vs, hv, trace, total
model.eval()
with torch.no_grad():
    x = torch.randn(4 * B, 3, R, R, device=device)
    pred = model(x).argmax(-1)
del x, pred
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
