"""A BigGAN-style class-conditional GAN at 64 x 64 written from the paper: a generator of residual
up-blocks whose batch norms take their gains and biases from a shared class embedding concatenated
with a chunk of z (hierarchical latents), a SAGAN non-local attention block at 32 x 32 (max-pooled
keys and values), spectral norm (torch.nn.utils.parametrizations.spectral_norm) on every
convolution and linear; a projection discriminator of residual down-blocks with the same
attention; DiffAugment (brightness, saturation, contrast, translation by affine_grid/grid_sample,
cutout) applied to real and fake; hinge loss, orthogonal regularisation of the generator's weights,
two D steps per G step, Adam(0, 0.999) for each network with its own GradScaler under fp16
autocast, channels_last; then an EMA generator sampled with the truncation trick under no_grad;
batch 128, 2 iterations, 5 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm as SN

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12701)
B, CH, ZDIM, NCLS, RES = (4, 8, 40, 10, 32) if SMALL else (128, 64, 120, 1000, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUP = 4 if RES == 64 else 3
ZCH = ZDIM // (NUP + 1)


class CBN(nn.Module):
    def __init__(self, c, cond):
        super().__init__()
        self.bn = nn.BatchNorm2d(c, affine=False)
        self.gain = SN(nn.Linear(cond, c, bias=False))
        self.bias = SN(nn.Linear(cond, c, bias=False))

    def forward(self, x, y):
        g = 1 + self.gain(y)[:, :, None, None]
        b = self.bias(y)[:, :, None, None]
        return self.bn(x) * g + b


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.theta = SN(nn.Conv2d(c, c // 8, 1, bias=False))
        self.phi = SN(nn.Conv2d(c, c // 8, 1, bias=False))
        self.g = SN(nn.Conv2d(c, c // 2, 1, bias=False))
        self.o = SN(nn.Conv2d(c // 2, c, 1, bias=False))
        self.gamma = nn.Parameter(torch.tensor(0.0))

    def forward(self, x):
        b, c, h, w = x.shape
        theta = self.theta(x).flatten(2)
        phi = F.max_pool2d(self.phi(x), 2).flatten(2)
        g = F.max_pool2d(self.g(x), 2).flatten(2)
        beta = torch.softmax(torch.bmm(theta.transpose(1, 2), phi), -1)
        o = torch.bmm(g, beta.transpose(1, 2)).view(b, c // 2, h, w)
        return x + self.gamma * self.o(o)


class GBlock(nn.Module):
    def __init__(self, cin, cout, cond):
        super().__init__()
        self.bn1, self.bn2 = CBN(cin, cond), CBN(cout, cond)
        self.c1 = SN(nn.Conv2d(cin, cout, 3, padding=1))
        self.c2 = SN(nn.Conv2d(cout, cout, 3, padding=1))
        self.sc = SN(nn.Conv2d(cin, cout, 1))

    def forward(self, x, y):
        h = F.interpolate(F.relu(self.bn1(x, y)), scale_factor=2)
        h = self.c2(F.relu(self.bn2(self.c1(h), y)))
        return h + self.sc(F.interpolate(x, scale_factor=2))


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        mult = [16, 8, 4, 2, 1][-NUP - 1 :]
        self.embed = nn.Embedding(NCLS, 128)
        cond = 128 + ZCH
        self.fc = SN(nn.Linear(ZCH, 4 * 4 * mult[0] * CH))
        self.blocks = nn.ModuleList(GBlock(mult[i] * CH, mult[i + 1] * CH, cond) for i in range(NUP))
        self.attn = Attn(mult[-2] * CH)
        self.out_bn = nn.BatchNorm2d(mult[-1] * CH)
        self.out = SN(nn.Conv2d(mult[-1] * CH, 3, 3, padding=1))
        self.c0 = mult[0] * CH

    def forward(self, z, cls):
        zs = z.split(ZCH, 1)
        e = self.embed(cls)
        h = self.fc(zs[0]).view(-1, self.c0, 4, 4)
        for i, blk in enumerate(self.blocks):
            h = blk(h, torch.cat([e, zs[i + 1]], 1))
            if i == NUP - 2:
                h = self.attn(h)
        return torch.tanh(self.out(F.relu(self.out_bn(h))))


class DBlock(nn.Module):
    def __init__(self, cin, cout, down=True, pre=True):
        super().__init__()
        self.c1 = SN(nn.Conv2d(cin, cout, 3, padding=1))
        self.c2 = SN(nn.Conv2d(cout, cout, 3, padding=1))
        self.sc = SN(nn.Conv2d(cin, cout, 1))
        self.down, self.pre = down, pre

    def forward(self, x):
        h = F.relu(x) if self.pre else x
        h = self.c2(F.relu(self.c1(h)))
        s = self.sc(x)
        if self.down:
            h, s = F.avg_pool2d(h, 2), F.avg_pool2d(s, 2)
        return h + s


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        mult = [1, 2, 4, 8, 16][:NUP]
        self.blocks = nn.ModuleList(
            [DBlock(3, mult[0] * CH, pre=False)]
            + [DBlock(mult[i] * CH, mult[i + 1] * CH) for i in range(NUP - 1)]
            + [DBlock(mult[-1] * CH, mult[-1] * CH, down=False)]
        )
        self.attn = Attn(mult[0] * CH)
        self.lin = SN(nn.Linear(mult[-1] * CH, 1))
        self.embed = SN(nn.Embedding(NCLS, mult[-1] * CH))

    def forward(self, x, cls):
        h = x
        for i, blk in enumerate(self.blocks):
            h = blk(h)
            if i == 0:
                h = self.attn(h)
        h = F.relu(h).sum((2, 3))
        return self.lin(h).squeeze(1) + (self.embed(cls) * h).sum(1)


def diff_augment(x):
    b = x.shape[0]
    x = x + (torch.rand(b, 1, 1, 1, device=x.device) - 0.5)
    m = x.mean(1, keepdim=True)
    x = (x - m) * (torch.rand(b, 1, 1, 1, device=x.device) * 2) + m
    m = x.mean((1, 2, 3), keepdim=True)
    x = (x - m) * (torch.rand(b, 1, 1, 1, device=x.device) + 0.5) + m
    theta = torch.zeros(b, 2, 3, device=x.device)
    theta[:, 0, 0] = 1
    theta[:, 1, 1] = 1
    theta[:, :, 2] = (torch.rand(b, 2, device=x.device) - 0.5) * 0.25
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    x = F.grid_sample(x, grid.to(x.dtype), padding_mode="zeros", align_corners=False)
    size = x.shape[2] // 2
    cy = torch.randint(0, x.shape[2], (b, 1, 1), device=x.device)
    cx = torch.randint(0, x.shape[3], (b, 1, 1), device=x.device)
    gy = torch.arange(x.shape[2], device=x.device)[None, :, None]
    gx = torch.arange(x.shape[3], device=x.device)[None, None, :]
    keep = ((gy - cy).abs() >= size // 2) | ((gx - cx).abs() >= size // 2)
    return x * keep[:, None].to(x.dtype)


def ortho_reg(model, strength=1e-4):
    total = 0.0
    for name, p in model.named_parameters():
        if p.dim() < 2 or "embed" in name or "original" not in name:
            continue
        w = p.flatten(1)
        gram = w @ w.t()
        total = total + (gram * (1 - torch.eye(w.shape[0], device=w.device))).pow(2).sum()
    return strength * total


G = Generator().to(device).to(memory_format=torch.channels_last)
D = Discriminator().to(device).to(memory_format=torch.channels_last)
G_ema = copy.deepcopy(G).eval()
for p in G_ema.parameters():
    p.requires_grad_(False)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.999), eps=1e-6)
opt_d = torch.optim.Adam(D.parameters(), lr=4e-4, betas=(0.0, 0.999), eps=1e-6)
scaler_g = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=device == "cuda")
scaler_d = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=device == "cuda")
real_pool = torch.rand(4 * B, 3, RES, RES, device=device) * 2 - 1
cls_pool = torch.randint(0, NCLS, (4 * B,), device=device)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for it in range(2):
    for _ in range(2):
        idx = torch.randint(0, 4 * B, (B,), device=device)
        real = real_pool[idx].contiguous(memory_format=torch.channels_last)
        yr = cls_pool[idx]
        z = torch.randn(B, ZDIM, device=device)
        yf = torch.randint(0, NCLS, (B,), device=device)
        with torch.autocast(device, dtype=torch.float16):
            with torch.no_grad():
                fake = G(z, yf)
            d_real = D(diff_augment(real), yr)
            d_fake = D(diff_augment(fake), yf)
            loss_d = F.relu(1 - d_real.float()).mean() + F.relu(1 + d_fake.float()).mean()
        opt_d.zero_grad(set_to_none=True)
        scaler_d.scale(loss_d).backward()
        scaler_d.step(opt_d)
        scaler_d.update()
        del real, fake, d_real, d_fake
    if device == "cuda":
        print(
            f"iter {it} d loss {loss_d.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    z = torch.randn(B, ZDIM, device=device)
    yf = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16):
        fake = G(z, yf)
        loss_g = -D(diff_augment(fake), yf).float().mean()
    loss_g = loss_g + ortho_reg(G)
    opt_g.zero_grad(set_to_none=True)
    scaler_g.scale(loss_g).backward()
    scaler_g.step(opt_g)
    scaler_g.update()
    with torch.no_grad():
        for pe, p in zip(G_ema.parameters(), G.parameters(), strict=True):
            pe.lerp_(p, 1 - 0.999)
        for be, b in zip(G_ema.buffers(), G.buffers(), strict=True):
            be.copy_(b)
    if device == "cuda":
        print(
            f"iter {it} g loss {loss_g.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del fake, loss_g, loss_d

samples = []
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    for _ in range(4):
        z = torch.fmod(torch.randn(B, ZDIM, device=device), 0.5)
        y = torch.randint(0, NCLS, (B,), device=device)
        samples.append(((G_ema(z, y).float() + 1) * 127.5).clamp(0, 255).to(torch.uint8).cpu())
if device == "cuda":
    print(
        f"samples {sum(s.numel() for s in samples)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke samples {samples[0].shape}")
