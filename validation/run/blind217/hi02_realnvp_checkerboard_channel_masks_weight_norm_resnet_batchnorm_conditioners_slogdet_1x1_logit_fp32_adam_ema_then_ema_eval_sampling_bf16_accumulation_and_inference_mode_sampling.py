"""RealNVP (Dinh, Sohl-Dickstein & Bengio 2017) on random 32 x 32 RGB images, with a Glow-style free 1x1
convolution before every channel-wise coupling whose log-determinant is torch.linalg.slogdet.

Pre-processing: uniform dequantisation then y = logit(a + (1 - 2a) x) with its log-determinant. Scale 1:
three affine couplings with checkerboard masks (a [1, 1, H, W] buffer, alternating), a squeeze (reshape +
permute), three channel-wise couplings each after a 1x1 convolution, then half of the channels factored
out; scale 2: four checkerboard couplings on the rest. Each conditioner is a ResNet of weight-normalised
3x3 convolutions (torch.nn.utils.parametrizations.weight_norm) with BatchNorm2d and ReLU (64 channels, 6
blocks) emitting s and t, s = scale * tanh(s). Loss: bits per dimension plus an L2 penalty on the
weight-norm gains. An EMA of the weights and the BatchNorm buffers by torch.optim.swa_utils.AveragedModel.

Phases: 3 steps at batch 128 in fp32 with Adam and the EMA updated every step; the EMA model's bits per
dimension at batch 512 under no_grad and 128 samples drawn through the inverse (the 1x1 weights inverted by
torch.inverse); 4 optimiser steps of 2 accumulated micro-batches of 128 under bf16 autocast; then
empty_cache() and 1024 samples under inference_mode. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2172)
device = "cuda" if torch.cuda.is_available() else "cpu"
SIZE, MID, BLOCKS = (8, 16, 2) if SMALL else (32, 64, 6)
BATCH, EVAL_BATCH, SAMPLES, BIG_SAMPLES = (4, 8, 4, 8) if SMALL else (128, 512, 128, 1024)
ALPHA = 0.05


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def squeeze(x):
    b, c, h, w = x.shape
    return x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4).reshape(b, c * 4, h // 2, w // 2)


def unsqueeze(x):
    b, c, h, w = x.shape
    return x.reshape(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3).reshape(b, c // 4, h * 2, w * 2)


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(ch), nn.BatchNorm2d(ch)
        self.conv1 = weight_norm(nn.Conv2d(ch, ch, 3, padding=1, bias=False))
        self.conv2 = weight_norm(nn.Conv2d(ch, ch, 3, padding=1))

    def forward(self, x):
        h = self.conv1(F.relu(self.bn1(x)))
        return x + self.conv2(F.relu(self.bn2(h)))


class ResNetConditioner(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.inp = weight_norm(nn.Conv2d(cin, MID, 3, padding=1))
        self.blocks = nn.Sequential(*[ResBlock(MID) for _ in range(BLOCKS)])
        self.bn = nn.BatchNorm2d(MID)
        self.out = weight_norm(nn.Conv2d(MID, cout, 3, padding=1))
        nn.init.zeros_(self.out.parametrizations.weight.original0)
        nn.init.zeros_(self.out.bias)

    def forward(self, x):
        return self.out(F.relu(self.bn(self.blocks(self.inp(x)))))


class CheckerboardCoupling(nn.Module):
    def __init__(self, channels, size, parity):
        super().__init__()
        ii, jj = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        self.register_buffer("mask", ((ii + jj + parity) % 2).float().view(1, 1, size, size))
        self.net = ResNetConditioner(channels + 1, 2 * channels)
        self.scale = nn.Parameter(torch.ones(1, channels, 1, 1))

    def st(self, x):
        xm = x * self.mask
        h = self.net(torch.cat([xm, self.mask.expand(x.shape[0], -1, -1, -1)], 1))
        s, t = h.chunk(2, 1)
        s = self.scale * torch.tanh(s) * (1 - self.mask)
        return s, t * (1 - self.mask)

    def forward(self, x):
        s, t = self.st(x)
        return x * torch.exp(s) + t, s.flatten(1).sum(1)

    def reverse(self, y):
        s, t = self.st(y)
        return (y - t) * torch.exp(-s)


class ChannelCoupling(nn.Module):
    def __init__(self, channels, flip):
        super().__init__()
        self.flip = flip
        self.net = ResNetConditioner(channels // 2, channels)
        self.scale = nn.Parameter(torch.ones(1, channels // 2, 1, 1))
        w = torch.linalg.qr(torch.randn(channels, channels))[0]
        self.w = nn.Parameter(w)

    def split(self, x):
        a, b = x.chunk(2, 1)
        return (b, a) if self.flip else (a, b)

    def join(self, a, b):
        return torch.cat([b, a] if self.flip else [a, b], 1)

    def forward(self, x):
        h, w = x.shape[2:]
        x = F.conv2d(x, self.w.view(*self.w.shape, 1, 1))
        ld = h * w * torch.linalg.slogdet(self.w)[1]
        xa, xb = self.split(x)
        s, t = self.net(xa).chunk(2, 1)
        s = self.scale * torch.tanh(s)
        return self.join(xa, xb * torch.exp(s) + t), ld + s.flatten(1).sum(1)

    def reverse(self, y):
        ya, yb = self.split(y)
        s, t = self.net(ya).chunk(2, 1)
        s = self.scale * torch.tanh(s)
        x = self.join(ya, (yb - t) * torch.exp(-s))
        w_inv = torch.inverse(self.w.float()).to(x.dtype)
        return F.conv2d(x, w_inv.view(*w_inv.shape, 1, 1))


class RealNVP(nn.Module):
    def __init__(self):
        super().__init__()
        self.s1_checker = nn.ModuleList(CheckerboardCoupling(3, SIZE, i % 2) for i in range(3))
        self.s1_channel = nn.ModuleList(ChannelCoupling(12, i % 2 == 1) for i in range(3))
        self.s2_checker = nn.ModuleList(CheckerboardCoupling(6, SIZE // 2, i % 2) for i in range(4))

    def forward(self, x):
        ld = torch.zeros(x.shape[0], device=x.device)
        for f in self.s1_checker:
            x, d = f(x)
            ld = ld + d
        x = squeeze(x)
        for f in self.s1_channel:
            x, d = f(x)
            ld = ld + d
        z1, x = x.chunk(2, 1)
        for f in self.s2_checker:
            x, d = f(x)
            ld = ld + d
        logp = -0.5 * (z1.float() ** 2 + math.log(2 * math.pi)).flatten(1).sum(1)
        logp = logp - 0.5 * (x.float() ** 2 + math.log(2 * math.pi)).flatten(1).sum(1)
        return logp, ld

    def reverse(self, z1, z2):
        x = z2
        for f in reversed(self.s2_checker):
            x = f.reverse(x)
        x = torch.cat([z1, x], 1)
        for f in reversed(self.s1_channel):
            x = f.reverse(x)
        x = unsqueeze(x)
        for f in reversed(self.s1_checker):
            x = f.reverse(x)
        return (torch.sigmoid(x) - ALPHA) / (1 - 2 * ALPHA)


def preprocess(x):
    x = (x * 255.0 + torch.rand_like(x)) / 256.0
    y = ALPHA + (1 - 2 * ALPHA) * x
    z = torch.log(y) - torch.log1p(-y)
    ld = (math.log(1 - 2 * ALPHA) - torch.log(y) - torch.log1p(-y)).flatten(1).sum(1)
    return z, ld


def bits_per_dim(model, x):
    z, ld0 = preprocess(x)
    logp, ld = model(z)
    dims = x[0].numel()
    nll = -(logp + ld + ld0 - dims * math.log(256.0))
    return (nll / (dims * math.log(2.0))).mean()


def gains_l2(model):
    return sum(p.square().sum() for n, p in model.named_parameters() if n.endswith("original0"))


def images(n):
    return torch.randint(0, 256, (n, 3, SIZE, SIZE), device=device).float() / 255.0


def sample(model, n):
    z1 = torch.randn(n, 6, SIZE // 2, SIZE // 2, device=device)
    z2 = torch.randn(n, 6, SIZE // 2, SIZE // 2, device=device)
    return model.reverse(z1, z2)


model = RealNVP().to(device)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(3):
    loss = bits_per_dim(model, images(BATCH)) + 5e-5 * gains_l2(model)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ema.update_parameters(model)
print(f"fp32 adam loss {loss.item():.4f}")
report("realnvp fp32 adam ema")

ema.eval()
with torch.no_grad():
    bpd = bits_per_dim(ema.module, images(EVAL_BATCH))
    x = sample(ema.module, SAMPLES)
print(f"ema bpd {bpd.item():.4f} samples mean {x.mean().item():.4f}")
del x
report("ema eval and sampling no_grad")

accum = 2
for it in range(4):
    opt.zero_grad(set_to_none=True)
    for micro in range(accum):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = (bits_per_dim(model, images(BATCH)) + 5e-5 * gains_l2(model)) / accum
        loss.backward()
    opt.step()
    ema.update_parameters(model)
print(f"bf16 accumulated loss {loss.item() * accum:.4f}")
report("bf16 autocast accumulation")

del opt
if device == "cuda":
    torch.cuda.empty_cache()
with torch.inference_mode():
    x = sample(ema.module, BIG_SAMPLES)
    print(f"inference_mode samples {tuple(x.shape)} in [0, 1]: {(x.clamp(0, 1) == x).float().mean().item():.3f}")
del x
report("inference_mode sampling")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
