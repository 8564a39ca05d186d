"""nnU-Net's residual-encoder 3d_fullres network (ResEncUNet "M"-like) written by hand for a BraTS-like
task: 4 input modalities, 4 classes (background + 3 tumour regions), patch 128 x 128 x 128, batch 2.

Encoder: a stem Conv3d(4 -> 32, k 3) + InstanceNorm3d(affine, eps 1e-5) + LeakyReLU(0.01, inplace), then 6
stages of basic residual blocks (1, 3, 4, 6, 6, 6 blocks; widths 32, 64, 128, 256, 320, 320; the first
block of each stage after the first has stride 2 and a 1x1x1 strided conv + InstanceNorm shortcut).
Decoder: plain nnU-Net decoder, per stage ConvTranspose3d(k 2, s 2) up, torch.cat with the skip, two
Conv3d + InstanceNorm3d + LeakyReLU, and a 1x1x1 segmentation head at each of the 5 decoder resolutions
(deep supervision). Targets are integer label maps, downsampled for the lower heads with nearest
F.interpolate; loss = soft Dice (batch dice, no background, smooth 1e-5) + cross-entropy, deep supervision
weights 1/2^i normalised with the lowest resolution weighted 0.

Training: fp16 autocast + torch.amp.GradScaler, SGD(lr 1e-2, momentum 0.99, nesterov, weight decay 3e-5),
poly learning rate, clip_grad_norm_(12) after unscale_. Phases: the first iteration; 3 more; sliding
window inference (nnU-Net style: step 0.5, Gaussian importance map with sigma 1/8 of the patch, mirroring
along the last axis, fp16 autocast, logits accumulated in fp32 on the device) over one 4 x 160 x 192 x 160
volume under torch.inference_mode, then argmax and the segmentation moved to the host; finally the net
converted to channels_last_3d and trained 2 iterations under bf16 autocast without the scaler. 4 phases."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(188_01)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    PATCH, BATCH, STEPS, VOL, WIDTHS = (64, 64, 64), 1, 1, (80, 96, 80), (4, 8, 8, 16, 16, 16)
else:
    PATCH, BATCH, STEPS, VOL, WIDTHS = (128, 128, 128), 2, 3, (160, 192, 160), (32, 64, 128, 256, 320, 320)
IN_CH, N_CLS = 4, 4
BLOCKS = (1, 3, 4, 6, 6, 6)


def conv_norm_act(cin, cout, stride=1):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, stride=stride, padding=1),
        nn.InstanceNorm3d(cout, eps=1e-5, affine=True),
        nn.LeakyReLU(0.01, inplace=True),
    )


class BasicBlockD(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, stride=stride, padding=1)
        self.norm1 = nn.InstanceNorm3d(cout, eps=1e-5, affine=True)
        self.act1 = nn.LeakyReLU(0.01, inplace=True)
        self.conv2 = nn.Conv3d(cout, cout, 3, padding=1)
        self.norm2 = nn.InstanceNorm3d(cout, eps=1e-5, affine=True)
        self.act2 = nn.LeakyReLU(0.01, inplace=True)
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv3d(cin, cout, 1, stride=stride, bias=False),
                nn.InstanceNorm3d(cout, eps=1e-5, affine=True),
            )
        else:
            self.skip = nn.Identity()

    def forward(self, x):
        residual = self.skip(x)
        out = self.act1(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        out += residual
        return self.act2(out)


class ResEncUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = conv_norm_act(IN_CH, WIDTHS[0])
        stages = []
        cur = WIDTHS[0]
        for i, (w, n) in enumerate(zip(WIDTHS, BLOCKS, strict=True)):
            blocks = [BasicBlockD(cur, w, 1 if i == 0 else 2)]
            blocks += [BasicBlockD(w, w, 1) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            cur = w
        self.stages = nn.ModuleList(stages)
        self.transpconvs = nn.ModuleList()
        self.dec = nn.ModuleList()
        self.seg = nn.ModuleList()
        for i in range(len(WIDTHS) - 1, 0, -1):
            below, skip = WIDTHS[i], WIDTHS[i - 1]
            self.transpconvs.append(nn.ConvTranspose3d(below, skip, 2, stride=2))
            self.dec.append(nn.Sequential(conv_norm_act(2 * skip, skip), conv_norm_act(skip, skip)))
            self.seg.append(nn.Conv3d(skip, N_CLS, 1))

    def forward(self, x):
        skips = []
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
            skips.append(x)
        x = skips[-1]
        outs = []
        for j, (up, dec, seg) in enumerate(zip(self.transpconvs, self.dec, self.seg, strict=True)):
            x = up(x)
            x = torch.cat((x, skips[-(j + 2)]), 1)
            x = dec(x)
            outs.append(seg(x))
        return outs[::-1]  # highest resolution first


def soft_dice_loss(logits, target):
    probs = torch.softmax(logits.float(), 1)
    onehot = torch.zeros_like(probs).scatter_(1, target.long(), 1)
    axes = [0, 2, 3, 4]
    tp = (probs * onehot).sum(axes)
    fp = (probs * (1 - onehot)).sum(axes)
    fn = ((1 - probs) * onehot).sum(axes)
    dc = (2 * tp + 1e-5) / torch.clip(2 * tp + fp + fn + 1e-5, 1e-8)
    return -dc[1:].mean()


def dc_and_ce(logits, target):
    ce = F.cross_entropy(logits, target[:, 0].long())
    return soft_dice_loss(logits, target) + ce


n_heads = len(WIDTHS) - 1
ds_weights = np.array([1 / (2**i) for i in range(n_heads)])
ds_weights[-1] = 0
ds_weights = ds_weights / ds_weights.sum()
scales = [1 / (2**i) for i in range(n_heads)]


def deep_supervision_loss(outs, target):
    total = 0
    for w, s, out in zip(ds_weights, scales, outs, strict=True):
        if w == 0:
            continue
        t = target if s == 1 else F.interpolate(target, scale_factor=s, mode="nearest")
        total = total + w * dc_and_ce(out, t)
    return total


net = ResEncUNet().to(device)
print(f"params {sum(p.numel() for p in net.parameters()) / 1e6:.1f}M")
opt = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.99, nesterov=True, weight_decay=3e-5)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
MAX_ITERS = 1000
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    x = torch.randn(BATCH, IN_CH, *PATCH, device=device)
    y = torch.randint(0, N_CLS, (BATCH, 1, *PATCH), device=device).float()
    return x, y


net.train()
for it in range(STEPS + 1):
    for g in opt.param_groups:
        g["lr"] = 1e-2 * (1 - it / MAX_ITERS) ** 0.9
    x, y = batch()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        outs = net(x)
        loss = deep_supervision_loss(outs, y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(net.parameters(), 12)
    scaler.step(opt)
    scaler.update()
    print(f"iter {it} loss {loss.item():.4f}")
    if it == 0 and device == "cuda":
        print(f"first iter peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, outs, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def compute_gaussian(tile, sigma_scale=1.0 / 8, dtype=torch.float16):
    # separable Gaussian centred on the tile (what gaussian_filter of a centred delta gives)
    g = torch.ones(tile, dtype=torch.float64)
    for dim, n in enumerate(tile):
        coords = torch.arange(n, dtype=torch.float64) - n // 2
        g1 = torch.exp(-0.5 * (coords / (n * sigma_scale)) ** 2)
        shape = [1, 1, 1]
        shape[dim] = n
        g = g * g1.view(shape)
    g = g / (torch.max(g) / 10)
    g = g.to(dtype)
    g[g == 0] = torch.min(g[g != 0])
    return g


def compute_steps(image_size, tile, step_size=0.5):
    steps = []
    for dim in range(3):
        target = tile[dim] * step_size
        n = int(np.ceil((image_size[dim] - tile[dim]) / target)) + 1
        max_step = image_size[dim] - tile[dim]
        actual = max_step / (n - 1) if n > 1 else 99999999999
        steps.append([int(np.round(actual * i)) for i in range(n)])
    return steps


net.eval()
volume = torch.randn(IN_CH, *VOL, device=device)
with torch.inference_mode():
    gaussian = compute_gaussian(PATCH).to(device)
    logits = torch.zeros((N_CLS, *VOL), dtype=torch.float32, device=device)
    counts = torch.zeros(VOL, dtype=torch.float16, device=device)
    steps = compute_steps(VOL, PATCH)
    n_tiles = 0
    for sx in steps[0]:
        for sy in steps[1]:
            for sz in steps[2]:
                sl = (slice(sx, sx + PATCH[0]), slice(sy, sy + PATCH[1]), slice(sz, sz + PATCH[2]))
                tile = volume[(slice(None), *sl)][None]
                with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                    pred = net(tile)[0]
                    pred = pred + torch.flip(net(torch.flip(tile, (4,)))[0], (4,))
                    pred = pred / 2
                logits[(slice(None), *sl)] += pred[0] * gaussian
                counts[sl] += gaussian
                n_tiles += 1
    logits /= counts
    seg = logits.argmax(0).to(torch.uint8).cpu()
print(f"tiles {n_tiles} segmentation {tuple(seg.shape)} labels {seg.unique().tolist()}")
del logits, counts, pred, tile, gaussian
if device == "cuda":
    print(f"inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

net = net.to(memory_format=torch.channels_last_3d)
net.train()
for it in range(2):
    x, y = batch()
    x = x.contiguous(memory_format=torch.channels_last_3d)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        outs = net(x)
        loss = deep_supervision_loss(outs, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 12)
    opt.step()
    print(f"bf16 channels_last_3d iter {it} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"channels_last_3d allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
