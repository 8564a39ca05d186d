"""Latent diffusion training step by step: a frozen convolutional VAE encoder (GroupNorm + SiLU
ResNet blocks, 8x downsampling, mean/log-variance head sampled with the reparameterisation trick)
run under no_grad in bf16, a time-conditioned conv UNet denoiser (sinusoidal timestep embedding,
skip connections, a self-attention block at the bottom) trained under bf16 autocast on epsilon
prediction with a cosine noise schedule, AdamW with foreach, and an EMA copy of the denoiser updated
with torch._foreach_lerp_ after every step; batch 32 of 256 x 256 images, 3 steps; 4 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8505)
B, R, C = (2, 32, 16) if SMALL else (32, 256, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim=None):
        super().__init__()
        self.n1 = nn.GroupNorm(8, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.n2 = nn.GroupNorm(8, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout) if tdim else None
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb=None):
        h = self.c1(F.silu(self.n1(x)))
        if self.t is not None:
            h = h + self.t(temb)[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return h + self.skip(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [C // 2, C, C * 2, C * 2]
        self.inp = nn.Conv2d(3, chans[0], 3, padding=1)
        layers = []
        for i in range(3):
            layers += [
                ResBlock(chans[i], chans[i + 1]),
                nn.Conv2d(chans[i + 1], chans[i + 1], 3, stride=2, padding=1),
            ]
        self.body = nn.Sequential(*layers)
        self.out = nn.Conv2d(chans[-1], 8, 3, padding=1)

    def forward(self, x):
        mean, logvar = self.out(self.body(self.inp(x))).chunk(2, dim=1)
        return mean + torch.exp(0.5 * logvar.clamp(-30, 20)) * torch.randn_like(mean)


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        td = C * 4
        self.temb = nn.Sequential(nn.Linear(C, td), nn.SiLU(), nn.Linear(td, td))
        self.inp = nn.Conv2d(4, C, 3, padding=1)
        self.d1 = ResBlock(C, C, td)
        self.down = nn.Conv2d(C, C, 3, stride=2, padding=1)
        self.d2 = ResBlock(C, C * 2, td)
        self.attn_norm = nn.GroupNorm(8, C * 2)
        self.attn = nn.MultiheadAttention(C * 2, 4, batch_first=True)
        self.u2 = ResBlock(C * 4, C, td)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.u1 = ResBlock(C * 2, C, td)
        self.out = nn.Conv2d(C, 4, 3, padding=1)

    def forward(self, z, t):
        half = C // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=z.device) / half)
        emb = self.temb(torch.cat([torch.sin(t[:, None] * freqs), torch.cos(t[:, None] * freqs)], dim=1))
        h0 = self.d1(self.inp(z), emb)
        h1 = self.d2(self.down(h0), emb)
        b, c, hh, ww = h1.shape
        seq = self.attn_norm(h1).flatten(2).transpose(1, 2)
        h1 = h1 + self.attn(seq, seq, seq, need_weights=False)[0].transpose(1, 2).reshape(b, c, hh, ww)
        h = self.u2(torch.cat([h1, h1], dim=1), emb)
        h = self.u1(torch.cat([self.up(h), h0], dim=1), emb)
        return self.out(F.silu(h))


vae = Encoder().to(device).eval().requires_grad_(False)
if device == "cuda":
    vae = vae.to(torch.bfloat16)
unet = Denoiser().to(device)
ema = copy.deepcopy(unet).requires_grad_(False)
optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-4, foreach=True)
ema_params = list(ema.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.rand(B, 3, R, R, device=device) * 2 - 1
    with torch.no_grad():
        latents = vae(images.to(next(vae.parameters()).dtype)).float() * 0.18215
    t = torch.rand(B, device=device)
    alpha_bar = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    noise = torch.randn_like(latents)
    noisy = (
        alpha_bar.sqrt()[:, None, None, None] * latents + (1 - alpha_bar).sqrt()[:, None, None, None] * noise
    )
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        pred = unet(noisy, t * 1000)
    loss = F.mse_loss(pred.float(), noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, list(unet.parameters()), 1 - 0.999)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    del images, latents, noise, noisy, pred, loss
