"""EDSR (Lim et al.) written from the paper at the "large"-ish setting of 32 residual blocks of 128
features with residual scaling 0.1, no batch norm, the RGB mean-shift as fixed 1x1 convolutions,
a x4 upsampler of two conv + `pixel_shuffle(2)` stages; fp32 with TF32 convolutions and matmuls,
channels_last model and inputs, L1 loss, Adam (betas 0.9/0.999, eps 1e-8) with MultiStepLR, 3 steps
on batch 16 of 48x48 low-resolution patches (192x192 targets); then the geometric self-ensemble
(8 flips/transposes, outputs transformed back and averaged) on a 1x3x256x256 image under no_grad,
split into 4 overlapping quadrants (EDSR's `chop` with shave 10) each run through the 8 transforms,
and a PSNR on the Y channel; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13105)
NB, NF, B, P, EIMG = (4, 32, 2, 24, 64) if SMALL else (32, 128, 16, 48, 256)
SCALE = 4
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class MeanShift(nn.Conv2d):
    def __init__(self, sign):
        super().__init__(3, 3, 1)
        mean = torch.tensor([0.4488, 0.4371, 0.4040])
        self.weight.data = torch.eye(3).view(3, 3, 1, 1)
        self.bias.data = sign * 255 * mean
        for p in self.parameters():
            p.requires_grad = False


class ResBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(NF, NF, 3, padding=1), nn.ReLU(True), nn.Conv2d(NF, NF, 3, padding=1)
        )

    def forward(self, x):
        return x + self.body(x).mul(0.1)


class EDSR(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub_mean, self.add_mean = MeanShift(-1), MeanShift(1)
        self.head = nn.Conv2d(3, NF, 3, padding=1)
        self.body = nn.Sequential(*[ResBlock() for _ in range(NB)], nn.Conv2d(NF, NF, 3, padding=1))
        up = []
        for _ in range(2):
            up += [nn.Conv2d(NF, 4 * NF, 3, padding=1), nn.PixelShuffle(2)]
        self.tail = nn.Sequential(*up, nn.Conv2d(NF, 3, 3, padding=1))

    def forward(self, x):
        x = self.head(self.sub_mean(x))
        x = x + self.body(x)
        return self.add_mean(self.tail(x))


model = EDSR().to(device).to(memory_format=torch.channels_last)
opt = torch.optim.Adam(
    [p for p in model.parameters() if p.requires_grad], lr=1e-4, betas=(0.9, 0.999), eps=1e-8
)
sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[200], gamma=0.5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    hr = torch.rand(B, 3, P * SCALE, P * SCALE, device=device) * 255
    lr = F.interpolate(hr, scale_factor=1 / SCALE, mode="bicubic", antialias=True).clamp(0, 255)
    lr = lr.contiguous(memory_format=torch.channels_last)
    sr = model(lr)
    loss = F.l1_loss(sr, hr)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del sr, loss, hr, lr


def transform(x, op):
    if op & 1:
        x = x.flip(-1)
    if op & 2:
        x = x.flip(-2)
    if op & 4:
        x = x.transpose(-1, -2)
    return x


def untransform(x, op):
    if op & 4:
        x = x.transpose(-1, -2)
    if op & 2:
        x = x.flip(-2)
    if op & 1:
        x = x.flip(-1)
    return x


def self_ensemble(x):
    outs = [
        untransform(model(transform(x, op).contiguous(memory_format=torch.channels_last)), op)
        for op in range(8)
    ]
    return torch.stack(outs).mean(0)


def chop(x, shave=10):
    _, _, h, w = x.shape
    hh, hw = h // 2 + shave, w // 2 + shave
    parts = [x[..., :hh, :hw], x[..., :hh, w - hw :], x[..., h - hh :, :hw], x[..., h - hh :, w - hw :]]
    outs = [self_ensemble(p) for p in parts]
    s = SCALE
    out = x.new_empty(x.shape[0], 3, h * s, w * s)
    H, Wd = h * s // 2, w * s // 2
    out[..., :H, :Wd] = outs[0][..., :H, :Wd]
    out[..., :H, Wd:] = outs[1][..., :H, hw * s - Wd :]
    out[..., H:, :Wd] = outs[2][..., hh * s - H :, :Wd]
    out[..., H:, Wd:] = outs[3][..., hh * s - H :, hw * s - Wd :]
    return out


model.eval()
hr = torch.rand(1, 3, EIMG * SCALE, EIMG * SCALE, device=device) * 255
lr = F.interpolate(hr, scale_factor=1 / SCALE, mode="bicubic", antialias=True).clamp(0, 255)
with torch.no_grad():
    sr = chop(lr).round().clamp(0, 255)
    coef = torch.tensor([65.738, 129.057, 25.064], device=device).view(1, 3, 1, 1) / 256
    diff = ((sr - hr) / 255 * coef).sum(1)[..., SCALE:-SCALE, SCALE:-SCALE]
    psnr = -10 * torch.log10(diff.pow(2).mean())
if device == "cuda":
    print(
        f"self-ensemble {tuple(sr.shape)} psnr {psnr.item():.2f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
