"""A 3-D U-Net for medical volumes written the way nnU-Net's PlainConvUNet and its trainer do it:
4 input modalities (BraTS-like MRI), 4 classes, 6 stages of 32, 64, 128, 256, 320, 320 features
(the first conv of each stage strided by 2 from stage 2 on), each conv a Conv3d 3x3x3 +
InstanceNorm3d(affine) + LeakyReLU(0.01, inplace); the decoder upsamples with ConvTranspose3d
(kernel = stride = 2), concatenates the skip, runs two conv blocks and has a 1x1x1 segmentation
head at every level; deep supervision over the 4 finest outputs with nnU-Net's weights (1/2^i,
normalised), the targets downsampled by nearest interpolation; the loss soft Dice (batch Dice over
the softmax, background left out) + cross entropy. fp16 autocast and torch.amp.GradScaler, SGD
(lr 1e-2, momentum 0.99, Nesterov, weight decay 3e-5) with a PolynomialLR (power 0.9),
clip_grad_norm_(12) after unscale_; batch 2 patches of 128^3, 2 steps (each its own phase); a
validation loss on a batch of 2 under no_grad and autocast; then sliding-window inference over a
160 x 192 x 192 case with 128^3 patches at half-patch steps, a Gaussian importance map (sigma
1/8 of the patch), mirror test-time augmentation along the last axis, fp16 autocast and the
logits accumulated in fp32 on the GPU, then argmax and per-class Dice; 5 phases."""

import itertools
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15905)
if SMALL:
    FEATURES, PATCH, B, CASE = [8, 16, 32, 32], (32, 32, 32), 1, (40, 48, 48)
else:
    FEATURES, PATCH, B, CASE = [32, 64, 128, 256, 320, 320], (128, 128, 128), 2, (160, 192, 192)
IN_CH, CLASSES = 4, 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class ConvDropoutNormReLU(nn.Module):
    def __init__(self, in_ch, out_ch, stride=1):
        super().__init__()
        self.conv = nn.Conv3d(in_ch, out_ch, 3, stride=stride, padding=1)
        self.norm = nn.InstanceNorm3d(out_ch, eps=1e-5, affine=True)
        self.nonlin = nn.LeakyReLU(0.01, inplace=True)

    def forward(self, x):
        return self.nonlin(self.norm(self.conv(x)))


class StackedConvBlocks(nn.Sequential):
    def __init__(self, in_ch, out_ch, first_stride):
        super().__init__(
            ConvDropoutNormReLU(in_ch, out_ch, first_stride), ConvDropoutNormReLU(out_ch, out_ch)
        )


class PlainConvUNet(nn.Module):
    def __init__(self, in_ch, features, num_classes, deep_supervision=True):
        super().__init__()
        self.deep_supervision = deep_supervision
        self.stages = nn.ModuleList()
        prev = in_ch
        for i, f in enumerate(features):
            self.stages.append(StackedConvBlocks(prev, f, 1 if i == 0 else 2))
            prev = f
        self.transpconvs = nn.ModuleList()
        self.dec_stages = nn.ModuleList()
        self.seg_layers = nn.ModuleList()
        for i in range(len(features) - 1, 0, -1):
            below, skip = features[i], features[i - 1]
            self.transpconvs.append(nn.ConvTranspose3d(below, skip, kernel_size=2, stride=2))
            self.dec_stages.append(StackedConvBlocks(2 * skip, skip, 1))
            self.seg_layers.append(nn.Conv3d(skip, num_classes, 1))

    def forward(self, x):
        skips = []
        for stage in self.stages:
            x = stage(x)
            skips.append(x)
        lres = skips[-1]
        seg_outputs = []
        for i, (up, dec, seg) in enumerate(
            zip(self.transpconvs, self.dec_stages, self.seg_layers, strict=False)
        ):
            x = up(lres)
            x = torch.cat((x, skips[-(i + 2)]), 1)
            x = dec(x)
            if self.deep_supervision or i == len(self.dec_stages) - 1:
                seg_outputs.append(seg(x))
            lres = x
        seg_outputs = seg_outputs[::-1]  # highest resolution first
        return seg_outputs if self.deep_supervision else seg_outputs[0]


def soft_dice_loss(logits, target, smooth=1e-5):
    probs = torch.softmax(logits.float(), 1)
    onehot = torch.zeros_like(probs).scatter_(1, target, 1)
    probs, onehot = probs[:, 1:], onehot[:, 1:]  # do_bg=False
    axes = [0, *range(2, probs.ndim)]  # batch dice
    tp = (probs * onehot).sum(axes)
    fp = (probs * (1 - onehot)).sum(axes)
    fn = ((1 - probs) * onehot).sum(axes)
    dc = (2 * tp + smooth) / torch.clip(2 * tp + fp + fn + smooth, 1e-8)
    return -dc.mean()


def dc_and_ce(logits, target):
    return soft_dice_loss(logits, target) + F.cross_entropy(logits, target[:, 0])


def deep_supervision_loss(outputs, target, weights):
    total = 0
    for w, out in zip(weights, outputs, strict=False):
        if w == 0:
            continue
        t = (
            target
            if out.shape[2:] == target.shape[2:]
            else F.interpolate(target.float(), out.shape[2:], mode="nearest").long()
        )
        total = total + w * dc_and_ce(out, t)
    return total


model = PlainConvUNet(IN_CH, FEATURES, CLASSES).to(device)
n_out = len(FEATURES) - 1
ds_weights = np.array([1 / (2**i) for i in range(n_out)])
ds_weights[-1] = 0
ds_weights[4:] = 0  # the 4 finest outputs
ds_weights = ds_weights / ds_weights.sum()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.99, nesterov=True, weight_decay=3e-5)
scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=1000, power=0.9)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
amp = dict(device_type=device, dtype=torch.float16, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    data = torch.randn(B, IN_CH, *PATCH, device=device)
    target = torch.randint(0, CLASSES, (B, 1, *PATCH), device=device)
    return data, target


model.train()
for step in range(2):
    data, target = batch()
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(**amp):
        outputs = model(data)
        loss = deep_supervision_loss(outputs, target, ds_weights)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 12)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del data, target, outputs, loss
model.eval()
with torch.no_grad(), torch.autocast(**amp):
    data, target = batch()
    val_loss = deep_supervision_loss(model(data), target, ds_weights)
print(f"val loss {val_loss.item():.4f}")
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del data, target, val_loss


def gaussian_importance_map(patch, sigma_scale=1.0 / 8):
    grids = torch.meshgrid(*[torch.arange(p, dtype=torch.float32) for p in patch], indexing="ij")
    g = torch.ones(patch)
    for grid, p in zip(grids, patch, strict=False):
        center, sigma = p // 2, p * sigma_scale
        g = g * torch.exp(-((grid - center) ** 2) / (2 * sigma**2))
    g = g / g.max()
    g[g == 0] = g[g != 0].min()
    return g.to(device)


def steps_for(size, patch, step_size=0.5):
    target = patch * step_size
    num = math.ceil((size - patch) / target) + 1
    actual = (size - patch) / (num - 1) if num > 1 else 99999999999
    return [round(actual * i) for i in range(num)]


model.deep_supervision = False
case = torch.randn(1, IN_CH, *CASE, device=device)
case_label = torch.randint(0, CLASSES, CASE, device=device)
gaussian = gaussian_importance_map(PATCH)
with torch.no_grad():
    logits = torch.zeros((CLASSES, *CASE), dtype=torch.float32, device=device)
    weights = torch.zeros(CASE, dtype=torch.float32, device=device)
    starts = [steps_for(s, p) for s, p in zip(CASE, PATCH, strict=False)]
    for sx, sy, sz in itertools.product(*starts):
        sl = (slice(sx, sx + PATCH[0]), slice(sy, sy + PATCH[1]), slice(sz, sz + PATCH[2]))
        patch = case[(slice(None), slice(None), *sl)]
        with torch.autocast(**amp):
            pred = model(patch)
            pred = pred + torch.flip(model(torch.flip(patch, (4,))), (4,))
        pred = pred[0].float() / 2
        logits[(slice(None), *sl)] += pred * gaussian
        weights[sl] += gaussian
    logits /= weights
    seg = logits.argmax(0)
    dice = []
    for c in range(1, CLASSES):
        inter = ((seg == c) & (case_label == c)).sum()
        dice.append((2 * inter / ((seg == c).sum() + (case_label == c).sum()).clamp(min=1)).item())
print("dice", [round(d, 3) for d in dice])
if device == "cuda":
    print(f"sliding window peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
