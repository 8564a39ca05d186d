"""A ShuffleNet-style network written by hand: grouped 1x1 convolutions, `F.channel_shuffle`,
depthwise 3x3, Hardswish, an `AdaptiveMaxPool2d` head and a multi-label objective
(`multilabel_soft_margin_loss`, 80 labels); batch 128 of 224x224, bf16 autocast, SGD with
momentum, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5501)
B, HW, W = (2, 32, 16) if SMALL else (128, 224, 120)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Unit(nn.Module):
    def __init__(self, c, stride):
        super().__init__()
        self.stride = stride
        self.g1 = nn.Sequential(nn.Conv2d(c, c, 1, groups=4, bias=False), nn.BatchNorm2d(c), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(c, c, 3, stride, 1, groups=c, bias=False), nn.BatchNorm2d(c))
        self.g2 = nn.Sequential(nn.Conv2d(c, c, 1, groups=4, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.g2(self.dw(F.channel_shuffle(self.g1(x), 4)))
        if self.stride == 1:
            return F.hardswish(x + y)
        return F.hardswish(torch.cat([F.avg_pool2d(x, 3, 2, 1), y], 1))


def stage(c, n):
    return nn.Sequential(Unit(c, 2), *[Unit(2 * c, 1) for _ in range(n - 1)])


model = nn.Sequential(
    nn.Conv2d(3, W, 3, 2, 1, bias=False),
    nn.BatchNorm2d(W),
    nn.Hardswish(),
    stage(W, 4),
    stage(2 * W, 8),
    stage(4 * W, 4),
    nn.AdaptiveMaxPool2d(1),
    nn.Flatten(),
    nn.Linear(8 * W, 80),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    y = (torch.rand(B, 80, device=device) < 0.1).float()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.multilabel_soft_margin_loss(model(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
