"""Glow written from the paper for 64 x 64 images: 3 levels of 8 flow steps (actnorm with
data-dependent initialisation on the first batch, an invertible 1x1 convolution whose matrix is
Q diag(exp(s)) with Q under torch.nn.utils.parametrizations.orthogonal (Cayley map) so that its
log-determinant is H W sum(s), an affine coupling whose network is two weight-normed 3x3/1x1
convolutions (parametrizations.weight_norm) and a zero-initialised 3x3), squeeze and split with a
learned Gaussian prior per level; fp32, Adamax, bits per dimension at batch 64, 3 steps; then a
compact checkpoint through a state-dict post-hook that turns every float tensor into bf16 (loaded
back with a pre-hook), and sampling at temperature 0.7 through the inverse flows under
parametrize.cached(); 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrizations as P
import torch.nn.utils.parametrize as parametrize

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12602)
B, S, K, LEVELS, HID = (4, 16, 2, 2, 32) if SMALL else (64, 64, 8, 3, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ActNorm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.ready = False

    def forward(self, x):
        if not self.ready:
            with torch.no_grad():
                self.loc.copy_(-x.mean((0, 2, 3), keepdim=True))
                self.logs.copy_(-torch.log(x.std((0, 2, 3), keepdim=True) + 1e-6))
            self.ready = True
        return (x + self.loc) * self.logs.exp(), self.logs.sum() * x.shape[2] * x.shape[3]

    def reverse(self, y):
        return y * (-self.logs).exp() - self.loc


class InvConv(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.q = P.orthogonal(nn.Linear(c, c, bias=False), orthogonal_map="cayley")
        self.s = nn.Parameter(torch.zeros(c))

    def weight(self):
        return self.q.weight * self.s.exp()[None]

    def forward(self, x):
        w = self.weight()
        return F.conv2d(x, w[:, :, None, None]), self.s.sum() * x.shape[2] * x.shape[3]

    def reverse(self, y):
        w = self.weight()
        return F.conv2d(y, torch.linalg.inv(w)[:, :, None, None])


class Coupling(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.net = nn.Sequential(
            P.weight_norm(nn.Conv2d(c // 2, HID, 3, padding=1)),
            nn.ReLU(),
            P.weight_norm(nn.Conv2d(HID, HID, 1)),
            nn.ReLU(),
            nn.Conv2d(HID, c, 3, padding=1),
        )
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def st(self, xa):
        h = self.net(xa)
        shift, raw = h[:, 0::2], h[:, 1::2]
        return shift, torch.sigmoid(raw + 2.0)

    def forward(self, x):
        xa, xb = x.chunk(2, 1)
        shift, scale = self.st(xa)
        yb = (xb + shift) * scale
        return torch.cat([xa, yb], 1), scale.log().flatten(1).sum(1)

    def reverse(self, y):
        ya, yb = y.chunk(2, 1)
        shift, scale = self.st(ya)
        return torch.cat([ya, yb / scale - shift], 1)


def squeeze(x):
    b, c, h, w = x.shape
    x = x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(b, c * 4, h // 2, w // 2)


def unsqueeze(x):
    b, c, h, w = x.shape
    x = x.view(b, c // 4, 2, 2, h, w).permute(0, 1, 4, 2, 5, 3)
    return x.reshape(b, c // 4, h * 2, w * 2)


class Level(nn.Module):
    def __init__(self, c, split):
        super().__init__()
        self.flows = nn.ModuleList()
        for _ in range(K):
            self.flows.extend([ActNorm(c * 4), InvConv(c * 4), Coupling(c * 4)])
        self.split = split
        zc = c * 2 if split else c * 4
        self.prior = nn.Conv2d(c * 2, zc * 2, 3, padding=1) if split else None
        self.top = nn.Parameter(torch.zeros(1, zc * 2, 1, 1)) if not split else None

    def forward(self, x):
        x = squeeze(x)
        logdet = 0.0
        for f in self.flows:
            x, ld = f(x)
            logdet = logdet + ld
        if self.split:
            x, z = x.chunk(2, 1)
            mean, logs = self.prior(x).chunk(2, 1)
        else:
            z = x
            mean, logs = self.top.expand(x.shape[0], -1, x.shape[2], x.shape[3]).chunk(2, 1)
        logp = (
            (-0.5 * (math.log(2 * math.pi) + 2 * logs + (z - mean) ** 2 * torch.exp(-2 * logs)))
            .flatten(1)
            .sum(1)
        )
        return x, logdet + logp

    def reverse(self, x, temp, shape):
        if self.split:
            mean, logs = self.prior(x).chunk(2, 1)
            z = mean + torch.randn_like(mean) * logs.exp() * temp
            x = torch.cat([x, z], 1)
        else:
            mean, logs = self.top.expand(shape[0], -1, shape[2], shape[3]).chunk(2, 1)
            x = mean + torch.randn_like(mean) * logs.exp() * temp
        for f in reversed(self.flows):
            x = f.reverse(x)
        return unsqueeze(x)


class Glow(nn.Module):
    def __init__(self):
        super().__init__()
        cs = [3 * 2**i for i in range(LEVELS)]
        self.levels = nn.ModuleList(Level(c, i < LEVELS - 1) for i, c in enumerate(cs))

    def forward(self, x):
        total = 0.0
        for lv in self.levels:
            x, lp = lv(x)
            total = total + lp
        return total

    @torch.no_grad()
    def sample(self, n, temp):
        shapes = []
        c, s = 3, S
        for _ in range(LEVELS):
            c, s = c * 4, s // 2
            shapes.append((n, c, s, s))
            c = c // 2
        x = None
        for lv, shp in zip(reversed(self.levels), reversed(shapes), strict=True):
            x = lv.reverse(x, temp, shp)
        return x


def to_bf16(module, state_dict, prefix, local_metadata):
    for k, v in state_dict.items():
        if v.is_floating_point():
            state_dict[k] = v.to(torch.bfloat16)


def from_bf16(state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
    for k, v in list(state_dict.items()):
        if k.startswith(prefix) and v.is_floating_point():
            state_dict[k] = v.float()


model = Glow().to(device)
model._register_state_dict_hook(to_bf16)
model._register_load_state_dict_pre_hook(from_bf16, with_module=False)
optimizer = torch.optim.Adamax(model.parameters(), lr=5e-4)
n_bins = 32.0
dims = 3 * S * S
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    img = torch.rand(B, 3, S, S, device=device)
    x = torch.floor(img * n_bins) / n_bins - 0.5 + torch.rand_like(img) / n_bins
    logp = model(x) - dims * math.log(n_bins)
    bpd = (-logp / (dims * math.log(2))).mean()
    optimizer.zero_grad(set_to_none=True)
    bpd.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 50.0)
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} bpd {bpd.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del img, x, logp, bpd
ckpt = model.state_dict()
model.load_state_dict(ckpt)
del ckpt
if device == "cuda":
    print(f"checkpoint peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.eval()
with parametrize.cached():
    samples = model.sample(B * 2, 0.7)
if device == "cuda":
    print(
        f"sample {tuple(samples.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke sample {tuple(samples.shape)}")
