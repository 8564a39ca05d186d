"""Jacobian regularisation (Hoffman et al. 2019) of a small CNN classifier on 32x32 images, fp32:
each step draws a random unit projection of the logits with torch.randn on the GPU, takes the
input-gradient of the projected logits with create_graph=True (a vector-Jacobian product through
five convolutions with BatchNorm and GELU), adds 0.01 times its squared Frobenius norm (scaled by
the class count) to the cross-entropy and backpropagates through both; Adam, batch 128, 3 steps,
then an eval pass under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9205)
B, R, W, C = (4, 16, 8, 10) if SMALL else (128, 32, 96, 100)
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.GELU())


model = nn.Sequential(
    block(3, W, 1),
    block(W, W, 1),
    block(W, 2 * W, 2),
    block(2 * W, 2 * W, 1),
    block(2 * W, 4 * W, 2),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(4 * W, C),
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device).requires_grad_(True)
    y = torch.randint(0, C, (B,), device=device)
    logits = model(x)
    ce = F.cross_entropy(logits, y)
    v = torch.randn(B, C, device=device)
    v = v / v.norm(dim=1, keepdim=True)
    (jv,) = torch.autograd.grad(logits, x, grad_outputs=v, create_graph=True)
    jac = C * jv.pow(2).sum() / B
    total = ce + 0.01 * jac
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} ce {ce.item():.3f} jac {jac.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, logits, ce, v, jv, jac, total
model.eval()
with torch.no_grad():
    pred = model(torch.randn(4 * B, 3, R, R, device=device)).argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
