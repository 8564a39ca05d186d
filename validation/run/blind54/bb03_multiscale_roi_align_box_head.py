"""A two-stage detector's box head on FPN features: torchvision's `MultiScaleRoIAlign` pools 512
boxes per image from four levels (strides 4 to 32 of 800x800 images) into 7x7, a two-layer MLP head
(1024) classifies 91 classes and regresses boxes; the FPN features come from a trainable 3x3
convolution per level; 4 images, fp32, SGD with momentum, 2 steps; 3 phases."""

import os
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import MultiScaleRoIAlign

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5403)
B, IMG, NB, C = (1, 128, 16, 16) if SMALL else (4, 800, 512, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
names = ["p2", "p3", "p4", "p5"]
pool = MultiScaleRoIAlign(names, output_size=7, sampling_ratio=2)
lateral = nn.ModuleList([nn.Conv2d(C, C, 3, padding=1) for _ in names]).to(device)
head = nn.Sequential(nn.Flatten(), nn.Linear(C * 49, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU()).to(
    device
)
cls, reg = nn.Linear(1024, 91).to(device), nn.Linear(1024, 91 * 4).to(device)
params = [*lateral.parameters(), *head.parameters(), *cls.parameters(), *reg.parameters()]
optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    raw = [torch.randn(B, C, IMG // s, IMG // s, device=device) for s in (4, 8, 16, 32)]
    feats = OrderedDict((n, conv(f)) for n, conv, f in zip(names, lateral, raw, strict=True))
    xy = torch.rand(B, NB, 2, device=device) * (IMG - 200)
    wh = torch.rand(B, NB, 2, device=device) * 190 + 10
    boxes = list(torch.cat([xy, xy + wh], -1).unbind(0))
    h = head(pool(feats, boxes, [(IMG, IMG)] * B))
    labels = torch.randint(0, 91, (B * NB,), device=device)
    loss = F.cross_entropy(cls(h), labels) + F.smooth_l1_loss(reg(h), torch.randn(B * NB, 364, device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del raw, feats, xy, wh, boxes, h, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
