"""Multi-task learning with PCGrad gradient surgery: a shared 6-layer MLP trunk (2,048 wide) and three
heads (classification, regression, multi-label), per-task gradients of the shared parameters from
`torch.autograd.grad(..., retain_graph=True)`, conflicting gradients projected onto each other's normal
plane, the sum written into `.grad` by hand, heads by one backward, Adam, fp32, batch 512, 3 steps;
4 phases."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8605)
random.seed(8605)
B, IN, W, C, LBL = (8, 16, 32, 5, 6) if SMALL else (512, 1024, 2048, 100, 40)
device = "cuda" if torch.cuda.is_available() else "cpu"
layers = []
for i in range(6):
    layers += [nn.Linear(IN if i == 0 else W, W), nn.LayerNorm(W), nn.GELU()]
trunk = nn.Sequential(*layers).to(device)
heads = nn.ModuleList([nn.Linear(W, C), nn.Linear(W, 1), nn.Linear(W, LBL)]).to(device)
shared = list(trunk.parameters())
optimizer = torch.optim.Adam(list(trunk.parameters()) + list(heads.parameters()), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, IN, device=device)
    y_cls = torch.randint(0, C, (B,), device=device)
    y_reg = torch.randn(B, 1, device=device)
    y_lbl = (torch.rand(B, LBL, device=device) < 0.2).float()
    h = trunk(x)
    losses = [
        F.cross_entropy(heads[0](h), y_cls),
        F.mse_loss(heads[1](h), y_reg),
        F.binary_cross_entropy_with_logits(heads[2](h), y_lbl),
    ]
    grads = []
    for loss in losses:
        g = torch.autograd.grad(loss, shared, retain_graph=True)
        grads.append(torch.cat([t.reshape(-1) for t in g]))
        del g
    projected = []
    for i, gi in enumerate(grads):
        gi = gi.clone()
        order = [j for j in range(len(grads)) if j != i]
        random.shuffle(order)
        for j in order:
            dot = torch.dot(gi, grads[j])
            if dot < 0:
                gi -= dot / grads[j].pow(2).sum() * grads[j]
        projected.append(gi)
    merged = torch.stack(projected).sum(0)
    offset = 0
    for p in shared:
        n = p.numel()
        p.grad = merged[offset : offset + n].view_as(p).clone()
        offset += n
    head_loss = sum(losses)
    head_loss.backward(inputs=list(heads.parameters()))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {head_loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y_cls, y_reg, y_lbl, h, losses, grads, projected, merged, head_loss, gi
