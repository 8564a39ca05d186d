"""A two-stage detector's box head on its own: a ResNet-18 trunk (torchvision, fp32) gives a
stride-16 feature map, torchvision.ops.roi_align pools 7x7 from 128 fixed boxes per image (boxes
as a list of tensors), a two-layer MLP head classifies and regresses them; batch 4 of 512x512,
SGD, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import resnet18
from torchvision.ops import roi_align

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2603)
B, R, NBOX = (2, 64, 8) if SMALL else (4, 512, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
trunk = resnet18()
body = nn.Sequential(*list(trunk.children())[:-3]).to(device)  # through layer3: 256 channels, stride 16
head = nn.Sequential(
    nn.Flatten(), nn.Linear(256 * 7 * 7, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU()
).to(device)
cls = nn.Linear(1024, 21).to(device)
reg = nn.Linear(1024, 84).to(device)
params = [*body.parameters(), *head.parameters(), *cls.parameters(), *reg.parameters()]
optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, R, R, device=device)
    xy = torch.rand(B, NBOX, 2, device=device) * (R * 0.7)
    wh = torch.rand(B, NBOX, 2, device=device) * (R * 0.3) + 8
    boxes = [torch.cat([xy[i], xy[i] + wh[i]], dim=1) for i in range(B)]
    labels = torch.randint(0, 21, (B * NBOX,), device=device)
    targets = torch.randn(B * NBOX, 84, device=device)
    feats = body(images)
    pooled = roi_align(feats, boxes, output_size=(7, 7), spatial_scale=1 / 16, sampling_ratio=2, aligned=True)
    h = head(pooled)
    loss = F.cross_entropy(cls(h), labels) + F.smooth_l1_loss(reg(h), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, xy, wh, boxes, labels, targets, feats, pooled, h, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
