"""MoCo v2 self-supervised pretraining: a torchvision ResNet-34 query encoder with a 2-layer MLP head,
a momentum (key) encoder updated in place (`mul_`, `add_`) under `torch.no_grad`, a 16,384 x
128 negative queue refreshed by slice assignment, InfoNCE over 1 + 16,384 logits, fp16 autocast
with GradScaler, SGD, batch 64 at 160x160 with two random-flip/noise views, 3 steps; 4 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import resnet34

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8604)
B, R, K, D = (4, 64, 32, 16) if SMALL else (64, 160, 16384, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"


def encoder():
    net = resnet34()
    net.fc = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(inplace=True), nn.Linear(2048, D))
    return net


query = encoder().to(device)
key = copy.deepcopy(query)
for p in key.parameters():
    p.requires_grad_(False)
queue = F.normalize(torch.randn(K, D, device=device), dim=1)
ptr = 0
optimizer = torch.optim.SGD(query.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")


def views(x):
    a = torch.where(torch.rand(x.shape[0], 1, 1, 1, device=x.device) < 0.5, x, x.flip(3))
    return a + 0.1 * torch.randn_like(a)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    img = torch.randn(B, 3, R, R, device=device)
    xq, xk = views(img), views(img)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        q = F.normalize(query(xq), dim=1)
        with torch.no_grad():
            for pk, pq in zip(key.parameters(), query.parameters(), strict=True):
                pk.mul_(0.999).add_(pq.detach(), alpha=0.001)
            k = F.normalize(key(xk), dim=1)
        pos = (q * k).sum(1, keepdim=True)
        neg = q @ queue.t().to(q.dtype)
        logits = torch.cat([pos, neg], dim=1) / 0.2
        loss = F.cross_entropy(logits.float(), torch.zeros(B, dtype=torch.long, device=device))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        queue[ptr : ptr + B] = k.float()
        ptr = (ptr + B) % K
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del img, xq, xk, q, k, pos, neg, logits, loss
