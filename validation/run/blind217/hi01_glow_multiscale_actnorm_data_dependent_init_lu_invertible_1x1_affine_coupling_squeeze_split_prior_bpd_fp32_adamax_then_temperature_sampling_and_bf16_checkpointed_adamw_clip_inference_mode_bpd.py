"""Glow (Kingma & Dhariwal 2018) written by hand on random 64 x 64 RGB images quantised to 8 bits.

Three levels of eight flow steps each; a step is ActNorm (data-dependent initialisation from the first
batch: per-channel mean and standard deviation copied into the parameters under no_grad), an invertible
1x1 convolution with the LU-parametrised weight (W = P (L + I) (U + diag(sign(s) exp(log|s|))), P, sign(s)
fixed buffers; log-det = H W sum(log|s|)), and an affine coupling whose conditioner is conv3x3 -> ActNorm
-> ReLU -> conv1x1 -> ActNorm -> ReLU -> a zero-initialised conv3x3 (scale = sigmoid(raw + 2)). Squeeze is
reshape + permute + reshape; after each level but the last half of the channels split off and are scored
under a Gaussian whose mean and log-scale come from a zero-initialised conv of the other half. The loss is
bits per dimension with uniform dequantisation.

Phases: 3 training steps at batch 128 in fp32 with Adamax; temperature sampling (T = 0.7) of 64 images
under no_grad through the inverse flow (the 1x1 weights inverted by torch.linalg.inv, the coupling
undone); 3 steps under bf16 autocast with every flow step in non-reentrant activation checkpointing, AdamW
and gradient clipping at batch 256; then the test bits per dimension under inference_mode at batch 512.
4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2171)
device = "cuda" if torch.cuda.is_available() else "cpu"
SIZE, LEVELS, STEPS, HIDDEN = (16, 2, 2, 32) if SMALL else (64, 3, 8, 256)
BATCH, CKPT_BATCH, SAMPLE_BATCH, EVAL_BATCH = (4, 4, 4, 8) if SMALL else (128, 256, 64, 512)
N_BINS = 256


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def squeeze(x):
    b, c, h, w = x.shape
    x = x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(b, c * 4, h // 2, w // 2)


def unsqueeze(x):
    b, c, h, w = x.shape
    x = x.reshape(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(b, c // 4, h * 2, w * 2)


def gaussian_logp(x, mean, logs):
    return -0.5 * (math.log(2 * math.pi) + 2.0 * logs + (x - mean) ** 2 * torch.exp(-2.0 * logs))


class ActNorm(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.initialized = False

    @torch.no_grad()
    def initialize(self, x):
        flat = x.transpose(0, 1).reshape(x.shape[1], -1)
        mean, std = flat.mean(1), flat.std(1)
        self.loc.copy_(-mean.view_as(self.loc))
        self.logs.copy_(torch.log(1.0 / (std + 1e-6)).view_as(self.logs))
        self.initialized = True

    def forward(self, x):
        if not self.initialized:
            self.initialize(x)
        h, w = x.shape[2:]
        return (x + self.loc) * torch.exp(self.logs), h * w * self.logs.sum()

    def reverse(self, y):
        return y * torch.exp(-self.logs) - self.loc


class InvConvLU(nn.Module):
    def __init__(self, channels):
        super().__init__()
        w = torch.linalg.qr(torch.randn(channels, channels))[0]
        p, lower, upper = torch.linalg.lu(w)
        s = torch.diagonal(upper)
        self.register_buffer("p", p)
        self.register_buffer("sign_s", torch.sign(s))
        self.register_buffer("l_mask", torch.tril(torch.ones(channels, channels), -1))
        self.register_buffer("eye", torch.eye(channels))
        self.lower = nn.Parameter(lower)
        self.upper = nn.Parameter(torch.triu(upper, 1))
        self.log_s = nn.Parameter(torch.log(s.abs()))

    def weight(self):
        lower = self.lower * self.l_mask + self.eye
        upper = self.upper * self.l_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))
        return self.p @ lower @ upper

    def forward(self, x):
        w = self.weight()
        h, wd = x.shape[2:]
        return F.conv2d(x, w.unsqueeze(2).unsqueeze(3)), h * wd * self.log_s.sum()

    def reverse(self, y):
        w_inv = torch.linalg.inv(self.weight().float())
        return F.conv2d(y, w_inv.to(y.dtype).unsqueeze(2).unsqueeze(3))


class ZeroConv(nn.Module):
    def __init__(self, cin, cout, scale=3.0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.logscale = nn.Parameter(torch.zeros(1, cout, 1, 1))
        self.scale = scale

    def forward(self, x):
        return self.conv(x) * torch.exp(self.logscale * self.scale)


class Coupling(nn.Module):
    def __init__(self, channels):
        super().__init__()
        half = channels // 2
        self.conv1 = nn.Conv2d(half, HIDDEN, 3, padding=1, bias=False)
        self.an1 = ActNorm(HIDDEN)
        self.conv2 = nn.Conv2d(HIDDEN, HIDDEN, 1, bias=False)
        self.an2 = ActNorm(HIDDEN)
        self.out = ZeroConv(HIDDEN, channels)

    def params(self, xa):
        h = F.relu(self.an1(self.conv1(xa))[0])
        h = F.relu(self.an2(self.conv2(h))[0])
        h = self.out(h)
        shift, raw = h[:, 0::2], h[:, 1::2]
        return shift, torch.sigmoid(raw + 2.0)

    def forward(self, x):
        xa, xb = x.chunk(2, 1)
        shift, scale = self.params(xa)
        yb = (xb + shift) * scale
        return torch.cat([xa, yb], 1), torch.log(scale).flatten(1).sum(1)

    def reverse(self, y):
        ya, yb = y.chunk(2, 1)
        shift, scale = self.params(ya)
        return torch.cat([ya, yb / scale - shift], 1)


class FlowStep(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.actnorm = ActNorm(channels)
        self.invconv = InvConvLU(channels)
        self.coupling = Coupling(channels)

    def forward(self, x):
        x, ld1 = self.actnorm(x)
        x, ld2 = self.invconv(x)
        x, ld3 = self.coupling(x)
        return x, ld1 + ld2 + ld3

    def reverse(self, y):
        y = self.coupling.reverse(y)
        y = self.invconv.reverse(y)
        return self.actnorm.reverse(y)


class Glow(nn.Module):
    def __init__(self):
        super().__init__()
        self.levels = nn.ModuleList()
        self.priors = nn.ModuleList()
        c = 3
        for i in range(LEVELS):
            c *= 4
            self.levels.append(nn.ModuleList(FlowStep(c) for _ in range(STEPS)))
            if i < LEVELS - 1:
                self.priors.append(ZeroConv(c // 2, c))
                c //= 2
        self.top_channels = c
        self.use_checkpoint = False

    def forward(self, x):
        logdet = torch.zeros(x.shape[0], device=x.device)
        logp = torch.zeros(x.shape[0], device=x.device)
        for i, steps in enumerate(self.levels):
            x = squeeze(x)
            for step in steps:
                if self.use_checkpoint:
                    x, ld = checkpoint(step, x, use_reentrant=False)
                else:
                    x, ld = step(x)
                logdet = logdet + ld
            if i < LEVELS - 1:
                x, z = x.chunk(2, 1)
                mean, logs = self.priors[i](x).chunk(2, 1)
                logp = logp + gaussian_logp(z, mean, logs).flatten(1).sum(1)
        zeros = torch.zeros_like(x)
        logp = logp + gaussian_logp(x, zeros, zeros).flatten(1).sum(1)
        return logp, logdet

    @torch.no_grad()
    def sample(self, n, temperature):
        s = SIZE >> LEVELS
        x = torch.randn(n, self.top_channels, s, s, device=device) * temperature
        for i in reversed(range(LEVELS)):
            if i < LEVELS - 1:
                mean, logs = self.priors[i](x).chunk(2, 1)
                z = mean + torch.exp(logs) * torch.randn_like(mean) * temperature
                x = torch.cat([x, z], 1)
            for step in reversed(self.levels[i]):
                x = step.reverse(x)
            x = unsqueeze(x)
        return x


def images(n):
    x = torch.randint(0, N_BINS, (n, 3, SIZE, SIZE), device=device).float()
    return x / N_BINS - 0.5


def bits_per_dim(model, x):
    x = x + torch.rand_like(x) / N_BINS
    logp, logdet = model(x)
    dims = x[0].numel()
    ll = logp + logdet - dims * math.log(N_BINS)
    return (-ll / (dims * math.log(2.0))).mean()


model = Glow().to(device)
with torch.no_grad():
    bits_per_dim(model, images(BATCH))  # data-dependent ActNorm initialisation
opt = torch.optim.Adamax(model.parameters(), lr=1e-3)
for it in range(3):
    loss = bits_per_dim(model, images(BATCH))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"fp32 adamax bpd {loss.item():.4f}")
report("glow fp32 adamax")

model.eval()
samples = model.sample(SAMPLE_BATCH, 0.7)
print(f"samples {tuple(samples.shape)} mean {samples.mean().item():.4f} std {samples.std().item():.4f}")
del samples
report("temperature sampling no_grad")

model.train()
model.use_checkpoint = True
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-5)
for it in range(3):
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = bits_per_dim(model, images(CKPT_BATCH))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 50.0)
    opt.step()
print(f"bf16 checkpointed bpd {loss.item():.4f} grad norm {gn.item():.3f}")
report("glow bf16 checkpoint adamw")

model.eval()
model.use_checkpoint = False
with torch.inference_mode():
    bpd = bits_per_dim(model, images(EVAL_BATCH))
print(f"test bpd {bpd.item():.4f}")
report("inference_mode bpd")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
