"""HRNet-W32 (Sun et al. 2019) by hand for top-down human pose estimation on COCO-sized crops: a stem of two
3x3 stride-2 convs, a layer of four Bottlenecks, then stages of 2, 3 and 4 parallel branches (32, 64, 128,
256 channels at 1/4 .. 1/32 of the input) whose modules run BasicBlocks per branch and fuse every branch into
every other: 1x1 conv + BN + nearest upsampling from lower resolutions, chains of 3x3 stride-2 convs from
higher ones, summed and passed through ReLU. A 1x1 head on the highest branch gives 17 heatmaps at 1/4.

Phases: 3 steps at batch 32 on 256 x 192 crops in fp32 with AdamW (foreach default) and a cosine schedule,
the loss a joint-weighted MSE against Gaussian target heatmaps; flip-test evaluation under no_grad at batch
64 (the flipped heatmaps mirrored back, left/right joints swapped, shifted one pixel in place as HRNet's
test code does, averaged, then argmax decoding); then the model moved to channels_last and trained 3 steps at
384 x 288 under bf16 autocast with fused AdamW; evaluation at 384 x 288 under inference_mode in bf16
autocast. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2201)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, BATCH_HI = (2, 2, 2) if SMALL else (32, 64, 24)
RES, RES_HI = ((128, 96), (128, 96)) if SMALL else ((256, 192), (384, 288))
JOINTS = 17
FLIP_PAIRS = [(1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16)]
FLIP_INDEX = list(range(JOINTS))
for a, b in FLIP_PAIRS:
    FLIP_INDEX[a], FLIP_INDEX[b] = b, a


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, cout, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        residual = x if self.downsample is None else self.downsample(x)
        return F.relu(out + residual, inplace=True)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        residual = x if self.downsample is None else self.downsample(x)
        out += residual
        return self.relu(out)


def conv_bn(cin, cout, k, stride, relu):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class HighResolutionModule(nn.Module):
    def __init__(self, channels, blocks):
        super().__init__()
        self.branches = nn.ModuleList(
            nn.Sequential(*[BasicBlock(c, c) for _ in range(blocks)]) for c in channels
        )
        n = len(channels)
        self.fuse = nn.ModuleList()
        for i in range(n):
            row = nn.ModuleList()
            for j in range(n):
                if j > i:
                    row.append(conv_bn(channels[j], channels[i], 1, 1, relu=False))
                elif j == i:
                    row.append(nn.Identity())
                else:
                    steps = []
                    for k in range(i - j):
                        last = k == i - j - 1
                        steps.append(conv_bn(channels[j], channels[i] if last else channels[j], 3, 2, relu=not last))
                    row.append(nn.Sequential(*steps))
            self.fuse.append(row)

    def forward(self, xs):
        xs = [branch(x) for branch, x in zip(self.branches, xs)]
        out = []
        for i, row in enumerate(self.fuse):
            y = xs[i]
            for j, f in enumerate(row):
                if j > i:
                    y = y + F.interpolate(f(xs[j]), scale_factor=2 ** (j - i), mode="nearest")
                elif j < i:
                    y = y + f(xs[j])
            out.append(F.relu(y))
        return out


class HRNet(nn.Module):
    def __init__(self, width=32, joints=JOINTS):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 64, 3, 2, True), conv_bn(64, 64, 3, 2, True))
        down = nn.Sequential(nn.Conv2d(64, 256, 1, bias=False), nn.BatchNorm2d(256))
        self.layer1 = nn.Sequential(Bottleneck(64, 64, 1, down), *[Bottleneck(256, 64) for _ in range(3)])
        c2 = [width, width * 2]
        c3 = c2 + [width * 4]
        c4 = c3 + [width * 8]
        self.transition1 = nn.ModuleList([conv_bn(256, c2[0], 3, 1, True), conv_bn(256, c2[1], 3, 2, True)])
        self.stage2 = nn.Sequential(HighResolutionModule(c2, 4))
        self.transition2 = conv_bn(c2[-1], c3[-1], 3, 2, True)
        self.stage3 = nn.ModuleList(HighResolutionModule(c3, 4) for _ in range(4))
        self.transition3 = conv_bn(c3[-1], c4[-1], 3, 2, True)
        self.stage4 = nn.ModuleList(HighResolutionModule(c4, 4) for _ in range(3))
        self.final = nn.Conv2d(width, joints, 1)

    def forward(self, x):
        x = self.layer1(self.stem(x))
        xs = [t(x) for t in self.transition1]
        xs = self.stage2[0](xs)
        xs = xs + [self.transition2(xs[-1])]
        for m in self.stage3:
            xs = m(xs)
        xs = xs + [self.transition3(xs[-1])]
        for m in self.stage4:
            xs = m(xs)
        return self.final(xs[0])


def targets(n, res, sigma=2.0):
    h, w = res[0] // 4, res[1] // 4
    centers = torch.rand(n, JOINTS, 2, device=device) * torch.tensor([w - 1, h - 1], device=device)
    ys = torch.arange(h, device=device, dtype=torch.float32).view(1, 1, h, 1)
    xs = torch.arange(w, device=device, dtype=torch.float32).view(1, 1, 1, w)
    d2 = (xs - centers[..., 0, None, None]) ** 2 + (ys - centers[..., 1, None, None]) ** 2
    heat = torch.exp(-d2 / (2 * sigma**2))
    weight = (torch.rand(n, JOINTS, 1, device=device) > 0.2).float()
    return heat, weight


def joints_mse(pred, target, weight):
    # JointsMSELoss(use_target_weight=True): 0.5 * mean over joints of the weighted per-joint MSE
    n = pred.size(0)
    p = pred.reshape(n, JOINTS, -1)
    t = target.reshape(n, JOINTS, -1)
    return 0.5 * F.mse_loss(p * weight, t * weight)


def decode(heat):
    n, k, h, w = heat.shape
    maxvals, idx = heat.reshape(n, k, -1).max(2)
    coords = torch.stack([idx % w, idx // w], -1).float()
    return coords, maxvals


model = HRNet().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
for it in range(3):
    x = torch.randn(BATCH, 3, *RES, device=device)
    heat, weight = targets(BATCH, RES)
    loss = joints_mse(model(x), heat, weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
print(f"fp32 loss {loss.item():.6f}")
report("hrnet fp32 adamw")

model.eval()
with torch.no_grad():
    x = torch.randn(EVAL_BATCH, 3, *RES, device=device)
    out = model(x)
    flipped = model(torch.flip(x, [3]))
    flipped = torch.flip(flipped, [3])[:, FLIP_INDEX]
    flipped[:, :, :, 1:] = flipped.clone()[:, :, :, 0:-1]
    heat = (out + flipped) * 0.5
    coords, maxvals = decode(heat)
    del out, flipped
print(f"flip eval mean score {maxvals.mean().item():.4f} coord {coords.mean().item():.2f}")
report("flip test eval")

model.train()
model = model.to(memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=1e-4, fused=device == "cuda")
for it in range(3):
    x = torch.randn(BATCH_HI, 3, *RES_HI, device=device).contiguous(memory_format=torch.channels_last)
    heat, weight = targets(BATCH_HI, RES_HI)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = model(x)
    loss = joints_mse(pred.float(), heat, weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del pred
print(f"bf16 loss {loss.item():.6f} lr {math.log10(opt.param_groups[0]['lr']):.2f}")
report("hrnet bf16 channels_last 384x288")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(EVAL_BATCH, 3, *RES_HI, device=device).contiguous(memory_format=torch.channels_last)
    coords, maxvals = decode(model(x).float())
print(f"hi-res eval score {maxvals.mean().item():.4f}")
report("eval 384x288 bf16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
