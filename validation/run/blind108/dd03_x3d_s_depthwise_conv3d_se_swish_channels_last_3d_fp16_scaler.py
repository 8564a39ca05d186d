"""X3D-S video classifier, hand-written after the X3D paper: a 1x3x3 stride-(1,2,2) stem of 24
channels with a 5x1x1 depthwise temporal convolution, four stages of bottlenecks (1x1x1 expand by
2.25 to 54, 108, 216, 432 channels, 3x3x3 depthwise with spatial stride 2 in each stage's first
block, squeeze-excitation on every other block, swish, 1x1x1 project, BatchNorm3d), a 1x1x1
conv to 432, global pooling, a 2048-wide head and 400 classes; channels_last_3d model and input,
batch 8 of 13 frames at 160 x 160, fp16 autocast with GradScaler, SGD with nesterov momentum,
cosine schedule, 3 steps; then 3 clips under inference_mode; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10803)
B, T, R, STEPS = (2, 4, 48, 2) if SMALL else (8, 13, 160, 3)
DEPTHS = (1, 1, 2, 1) if SMALL else (3, 5, 11, 7)
device = "cuda" if torch.cuda.is_available() else "cpu"
mf = torch.channels_last_3d


class SE(nn.Module):
    def __init__(self, c, ratio=0.0625):
        super().__init__()
        hid = max(8, round(c * ratio / 8) * 8)
        self.fc1 = nn.Conv3d(c, hid, 1)
        self.fc2 = nn.Conv3d(hid, c, 1)

    def forward(self, x):
        s = x.mean((2, 3, 4), keepdim=True)
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(s))))


class Bottleneck(nn.Module):
    def __init__(self, cin, inner, cout, stride, se):
        super().__init__()
        self.a = nn.Sequential(nn.Conv3d(cin, inner, 1, bias=False), nn.BatchNorm3d(inner), nn.ReLU(True))
        self.b = nn.Conv3d(inner, inner, 3, (1, stride, stride), 1, groups=inner, bias=False)
        self.b_bn = nn.BatchNorm3d(inner)
        self.se = SE(inner) if se else nn.Identity()
        self.c = nn.Sequential(nn.Conv3d(inner, cout, 1, bias=False), nn.BatchNorm3d(cout))
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(
                nn.Conv3d(cin, cout, 1, (1, stride, stride), bias=False), nn.BatchNorm3d(cout)
            )

    def forward(self, x):
        h = self.se(self.b_bn(self.b(self.a(x))))
        h = self.c(F.silu(h))
        return F.relu(h + (x if self.short is None else self.short(x)))


class X3D(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, 24, (1, 3, 3), (1, 2, 2), (0, 1, 1), bias=False),
            nn.Conv3d(24, 24, (5, 1, 1), 1, (2, 0, 0), groups=24, bias=False),
            nn.BatchNorm3d(24),
            nn.ReLU(True),
        )
        blocks, cin = [], 24
        for cout, depth in zip((24, 48, 96, 192), DEPTHS, strict=True):
            inner = math.ceil(cout * 2.25)
            for i in range(depth):
                blocks.append(Bottleneck(cin, inner, cout, 2 if i == 0 else 1, se=i % 2 == 0))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.conv5 = nn.Sequential(nn.Conv3d(192, 432, 1, bias=False), nn.BatchNorm3d(432), nn.ReLU(True))
        self.pre = nn.Linear(432, 2048, bias=False)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(2048, 400)

    def forward(self, x):
        x = self.conv5(self.blocks(self.stem(x)))
        x = x.mean((2, 3, 4))
        return self.fc(self.drop(F.relu(self.pre(x))))


model = X3D().to(device, memory_format=mf)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
gen = torch.Generator(device=device).manual_seed(3)


def clip(n):
    x = torch.randn(n, 3, T, R, R, device=device, generator=gen).contiguous(memory_format=mf)
    return x, torch.randint(0, 400, (n,), device=device, generator=gen)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x, y = clip(B)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
with torch.inference_mode():
    x, y = clip(3)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        top5 = model(x).float().softmax(-1).topk(5).indices
if device == "cuda":
    print(
        f"eval {tuple(top5.shape)} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
