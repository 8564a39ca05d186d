"""An EDM2-style magnitude-preserving UNet (Karras et al. 2024) on 64 x 64 images written from the
paper's pseudo-code: MPConv layers with forced weight normalisation (the weight renormalised in
place under no_grad during training, then normalised again and scaled by 1/sqrt(fan_in) in the
forward), mp_silu, mp_sum and mp_cat, EDM2's resampling by depthwise (transposed) convolutions
of a box filter, pixel norm, no biases and no normalisation layers, cosine
self-attention (pixel-normed q/k) at 16 x 16 and 8 x 8, a Fourier noise embedding and class
embedding; the EDM loss with a learned per-noise-level uncertainty (logvar MLP), log-normal
sigmas; bf16 autocast, Adam (betas 0.9, 0.99) with an inverse-square-root learning-rate decay;
two power-function EMAs (sigma_rel 0.05 and 0.10) updated with torch._foreach_lerp_; then an EDM
Heun sampler (12 steps) under no_grad with guidance from the 0.05 EMA; batch 64, 3 steps, 5
phases."""

import copy
import math
import os

import numpy as np
import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12706)
B, CH, RES, NCLS, STEPS = (4, 16, 16, 10, 3) if SMALL else (64, 128, 64, 1000, 12)
MULTS = (1, 2, 3, 4)
SIGMA_DATA = 0.5
device = "cuda" if torch.cuda.is_available() else "cpu"


def normalize(x, dim=None, eps=1e-4):
    if dim is None:
        dim = list(range(1, x.ndim))
    norm = torch.linalg.vector_norm(x, dim=dim, keepdim=True, dtype=torch.float32)
    norm = torch.add(eps, norm, alpha=math.sqrt(norm.numel() / x.numel()))
    return x / norm.to(x.dtype)


def resample(x, mode):
    f = np.float32([1, 1])
    f = np.outer(f / f.sum(), f / f.sum())[np.newaxis, np.newaxis, :, :]
    f = torch.as_tensor(f, dtype=x.dtype, device=x.device)
    c = x.shape[1]
    if mode == "down":
        return torch.nn.functional.conv2d(x, f.tile([c, 1, 1, 1]), groups=c, stride=2)
    return torch.nn.functional.conv_transpose2d(x, (f * 4).tile([c, 1, 1, 1]), groups=c, stride=2)


def mp_silu(x):
    return torch.nn.functional.silu(x) / 0.596


def mp_sum(a, b, t=0.5):
    return a.lerp(b, t) / math.sqrt((1 - t) ** 2 + t**2)


def mp_cat(a, b, dim=1, t=0.5):
    na, nb = a.shape[dim], b.shape[dim]
    c = math.sqrt((na + nb) / ((1 - t) ** 2 + t**2))
    wa = c / math.sqrt(na) * (1 - t)
    wb = c / math.sqrt(nb) * t
    return torch.cat([wa * a, wb * b], dim=dim)


class MPFourier(nn.Module):
    def __init__(self, n, bandwidth=1):
        super().__init__()
        self.register_buffer("freqs", 2 * np.pi * torch.randn(n) * bandwidth)
        self.register_buffer("phases", 2 * np.pi * torch.rand(n))

    def forward(self, x):
        y = x.to(torch.float32)
        y = y.ger(self.freqs.to(torch.float32))
        y = y + self.phases.to(torch.float32)
        return (y.cos() * np.sqrt(2)).to(x.dtype)


class MPConv(nn.Module):
    def __init__(self, cin, cout, kernel):
        super().__init__()
        self.cout = cout
        self.weight = nn.Parameter(torch.randn(cout, cin, *kernel))

    def forward(self, x, gain=1):
        w = self.weight.to(torch.float32)
        if self.training:
            with torch.no_grad():
                self.weight.copy_(normalize(w))
        w = normalize(w)
        w = w * (gain / np.sqrt(w[0].numel()))
        w = w.to(x.dtype)
        if w.ndim == 2:
            return x @ w.t()
        return torch.nn.functional.conv2d(x, w, padding=(w.shape[-1] // 2,))


class Block(nn.Module):
    def __init__(self, cin, cout, emb, flavor, resample=None, attn=False):
        super().__init__()
        self.flavor, self.resample, self.attn = flavor, resample, attn
        self.emb_gain = nn.Parameter(torch.zeros([]))
        self.conv_res0 = MPConv(cout if flavor == "enc" else cin, cout, [3, 3])
        self.emb_linear = MPConv(emb, cout, [])
        self.conv_res1 = MPConv(cout, cout, [3, 3])
        self.conv_skip = MPConv(cin, cout, [1, 1]) if cin != cout else None
        if attn:
            self.attn_qkv = MPConv(cout, cout * 3, [1, 1])
            self.attn_proj = MPConv(cout, cout, [1, 1])
        self.heads = max(1, cout // 64)
        self.cat = False

    def forward(self, x, emb):
        if self.resample is not None:
            x = resample(x, self.resample)
        if self.flavor == "enc":
            if self.conv_skip is not None:
                x = self.conv_skip(x)
            x = normalize(x, dim=1)
        y = self.conv_res0(mp_silu(x))
        c = self.emb_linear(emb, gain=self.emb_gain) + 1
        y = mp_silu(y * c.unsqueeze(2).unsqueeze(3).to(y.dtype))
        y = self.conv_res1(y)
        if self.flavor == "dec" and self.conv_skip is not None:
            x = self.conv_skip(x)
        x = mp_sum(x, y, t=0.3)
        if self.attn:
            y = self.attn_qkv(x)
            y = y.reshape(y.shape[0], self.heads, -1, 3, y.shape[2] * y.shape[3])
            q, k, v = normalize(y, dim=2).unbind(3)
            w = torch.einsum("nhcq,nhck->nhqk", q, k / np.sqrt(q.shape[2])).softmax(dim=3)
            y = torch.einsum("nhqk,nhck->nhcq", w, v)
            y = self.attn_proj(y.reshape(*x.shape))
            x = mp_sum(x, y, t=0.3)
        return x.clamp(-256, 256)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        cblock = [CH * m for m in MULTS]
        cemb = max(cblock)
        self.emb_fourier = MPFourier(CH)
        self.emb_noise = MPConv(CH, cemb, [])
        self.emb_label = MPConv(NCLS, cemb, [])
        self.out_gain = nn.Parameter(torch.zeros([]))
        self.enc, self.dec = nn.ModuleList(), nn.ModuleList()
        cout = 4
        skips = []
        for level, c in enumerate(cblock):
            res = RES >> level
            if level == 0:
                cin, cout = cout, c
                self.enc.append(MPConv(cin, cout, [3, 3]))
            else:
                self.enc.append(Block(cout, cout, cemb, "enc", resample="down"))
            skips.append(cout)
            for _ in range(2):
                cin, cout = cout, c
                self.enc.append(Block(cin, cout, cemb, "enc", attn=res <= 16))
                skips.append(cout)
        for level, c in reversed(list(enumerate(cblock))):
            res = RES >> level
            if level == len(cblock) - 1:
                self.dec.append(Block(cout, cout, cemb, "dec", attn=True))
                self.dec.append(Block(cout, cout, cemb, "dec"))
            else:
                self.dec.append(Block(cout, cout, cemb, "dec", resample="up"))
            for _ in range(3):
                cin, cout = cout + skips.pop(), c
                self.dec.append(Block(cin, cout, cemb, "dec", attn=res <= 16))
                self.dec[-1].cat = True
        self.out_conv = MPConv(cout, 3, [3, 3])

    def forward(self, x, noise_labels, class_labels):
        emb = self.emb_noise(self.emb_fourier(noise_labels))
        emb = mp_sum(emb, self.emb_label(class_labels * np.sqrt(class_labels.shape[1])), t=0.5)
        emb = mp_silu(emb)
        x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)
        skips = []
        for blk in self.enc:
            x = blk(x) if isinstance(blk, MPConv) else blk(x, emb)
            skips.append(x)
        for blk in self.dec:
            if blk.cat:
                x = mp_cat(x, skips.pop(), t=0.5)
            x = blk(x, emb)
        return self.out_conv(x, gain=self.out_gain)


class Precond(nn.Module):
    def __init__(self):
        super().__init__()
        self.unet = UNet()
        self.logvar_fourier = MPFourier(128)
        self.logvar_linear = MPConv(128, 1, [])

    def forward(self, x, sigma, labels, return_logvar=False):
        sigma = sigma.reshape(-1, 1, 1, 1)
        c_skip = SIGMA_DATA**2 / (sigma**2 + SIGMA_DATA**2)
        c_out = sigma * SIGMA_DATA / (sigma**2 + SIGMA_DATA**2).sqrt()
        c_in = 1 / (SIGMA_DATA**2 + sigma**2).sqrt()
        c_noise = sigma.flatten().log() / 4
        f = self.unet(c_in * x, c_noise, labels)
        d = c_skip * x + c_out * f.to(torch.float32)
        if return_logvar:
            return d, self.logvar_linear(self.logvar_fourier(c_noise)).reshape(-1, 1, 1, 1)
        return d


def power_beta(sigma_rel, t):
    gamma = np.roots([1, 7, 16 - sigma_rel**-2, 12 - sigma_rel**-2]).real.max()
    return (1 - 1 / t) ** (gamma + 1)


net = Precond().to(device).train()
emas = [copy.deepcopy(net).eval().requires_grad_(False) for _ in (0.05, 0.10)]
opt = torch.optim.Adam(net.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / math.sqrt(max(s / 70000, 1)))
images = torch.randn(4 * B, 3, RES, RES, device=device) * SIGMA_DATA
classes = torch.randint(0, NCLS, (4 * B,), device=device)
if device == "cuda":
    print(f"networks {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    idx = torch.randint(0, 4 * B, (B,), device=device)
    x, labels = images[idx], torch.nn.functional.one_hot(classes[idx], NCLS).float()
    sigma = (torch.randn(B, device=device) * 1.2 - 0.4).exp()
    weight = (sigma**2 + SIGMA_DATA**2) / (sigma * SIGMA_DATA) ** 2
    noisy = x + torch.randn_like(x) * sigma.view(-1, 1, 1, 1)
    with torch.autocast(device, dtype=torch.bfloat16):
        denoised, logvar = net(noisy, sigma, labels, return_logvar=True)
    loss = (weight.view(-1, 1, 1, 1) / logvar.exp()) * (denoised - x) ** 2 + logvar
    loss = loss.sum() / (B * RES * RES)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    for p in net.parameters():
        if p.grad is not None:
            torch.nan_to_num(p.grad, nan=0, posinf=1e5, neginf=-1e5, out=p.grad)
    opt.step()
    sched.step()
    with torch.no_grad():
        src = [p.detach() for p in net.parameters()]
        for sr, ema in zip((0.05, 0.10), emas, strict=True):
            torch._foreach_lerp_(list(ema.parameters()), src, 1 - power_beta(sr, step + 2))
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, labels, sigma, weight, noisy, denoised, logvar, loss

main_net, guide = emas[1], emas[0]
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    n = B // 2
    labels = torch.nn.functional.one_hot(torch.randint(0, NCLS, (n,), device=device), NCLS).float()
    i = torch.arange(STEPS, dtype=torch.float64, device=device)
    t = (80 ** (1 / 7) + i / (STEPS - 1) * (0.002 ** (1 / 7) - 80 ** (1 / 7))) ** 7
    t = torch.cat([t, torch.zeros_like(t[:1])])
    x = torch.randn(n, 3, RES, RES, device=device, dtype=torch.float64) * t[0]

    def denoise(x, s):
        d = main_net(x.float(), s.float().expand(n), labels)
        g = guide(x.float(), s.float().expand(n), labels)
        return (g.lerp(d, 2.0)).double()

    for k in range(STEPS):
        d = (x - denoise(x, t[k])) / t[k]
        x_next = x + (t[k + 1] - t[k]) * d
        if k < STEPS - 1:
            d2 = (x_next - denoise(x_next, t[k + 1])) / t[k + 1]
            x_next = x + (t[k + 1] - t[k]) * (0.5 * d + 0.5 * d2)
        x = x_next
if device == "cuda":
    print(
        f"samples std {x.std().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke samples {tuple(x.shape)}")
