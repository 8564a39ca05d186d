"""Class-conditional latent diffusion with a hand-written U-ViT (a ViT over 2 x 2 patches of 32 x 32 x
4 latents with time and class tokens and long skip connections concatenated then projected,
13 blocks of width 512, 8 heads, SDPA) trained with the EDM objective (log-normal sigmas,
c_skip/c_out/c_in preconditioning, loss weights, 10% class dropout for guidance): AdamW under bf16
autocast for 2 steps of batch 64; then an 18-step EDM Heun sampler with classifier-free guidance
(scale 4, conditional and unconditional halves in one batch of 2 x 16) under torch.inference_mode,
its noise drawn from a seeded CUDA torch.Generator; 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10603)
if SMALL:
    B, SB, RES, D, HEADS, DEPTH, STEPS = 4, 2, 8, 32, 2, 3, 4
else:
    B, SB, RES, D, HEADS, DEPTH, STEPS = 64, 16, 32, 512, 8, 13, 18
CH, P, CLASSES = 4, 2, 1000
SIGMA_DATA, SIGMA_MIN, SIGMA_MAX, RHO = 0.5, 0.002, 80.0, 7.0
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self, skip=False):
        super().__init__()
        self.skip = nn.Linear(2 * D, D) if skip else None
        self.norm1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.norm2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, skip=None):
        if self.skip is not None:
            x = self.skip(torch.cat([x, skip], dim=-1))
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, D)
        x = x + self.proj(a)
        return x + self.mlp(self.norm2(x))


class UViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(CH, D, P, P)
        self.tokens = (RES // P) ** 2
        self.pos = nn.Parameter(torch.zeros(1, self.tokens + 2, D))
        self.time = nn.Sequential(nn.Linear(256, 4 * D), nn.SiLU(), nn.Linear(4 * D, D))
        self.label = nn.Embedding(CLASSES + 1, D)
        half = DEPTH // 2
        self.ins = nn.ModuleList(Block() for _ in range(half))
        self.mid = Block()
        self.outs = nn.ModuleList(Block(skip=True) for _ in range(half))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, P * P * CH)
        self.final = nn.Conv2d(CH, CH, 3, padding=1)

    def forward(self, x, c_noise, y):
        b = x.shape[0]
        freqs = torch.exp(-math.log(10000) * torch.arange(128, device=x.device) / 128)
        t = c_noise[:, None] * freqs[None]
        temb = self.time(torch.cat([t.cos(), t.sin()], dim=-1))
        h = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([temb[:, None], self.label(y)[:, None], h], dim=1) + self.pos
        skips = []
        for blk in self.ins:
            h = blk(h)
            skips.append(h)
        h = self.mid(h)
        for blk in self.outs:
            h = blk(h, skips.pop())
        h = self.head(self.norm(h))[:, 2:]
        g = RES // P
        h = h.view(b, g, g, P, P, CH).permute(0, 5, 1, 3, 2, 4).reshape(b, CH, RES, RES)
        return self.final(h)


def denoise(net, x, sigma, y):
    s = sigma.view(-1, 1, 1, 1)
    c_skip = SIGMA_DATA**2 / (s**2 + SIGMA_DATA**2)
    c_out = s * SIGMA_DATA / (s**2 + SIGMA_DATA**2).sqrt()
    c_in = 1 / (SIGMA_DATA**2 + s**2).sqrt()
    f = net((c_in * x), sigma.log() / 4, y)
    return c_skip * x + c_out * f.float()


net = UViT().to(device)
opt = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.03)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x0 = torch.randn(B, CH, RES, RES, device=device) * SIGMA_DATA
    y = torch.randint(0, CLASSES, (B,), device=device)
    y = torch.where(torch.rand(B, device=device) < 0.1, CLASSES, y)
    sigma = (torch.randn(B, device=device) * 1.2 - 1.2).exp()
    weight = (sigma**2 + SIGMA_DATA**2) / (sigma * SIGMA_DATA) ** 2
    noisy = x0 + torch.randn_like(x0) * sigma.view(-1, 1, 1, 1)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = denoise(net, noisy, sigma, y)
    loss = (weight.view(-1, 1, 1, 1) * (pred - x0) ** 2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x0, y, sigma, weight, noisy, pred, loss
gen = torch.Generator(device=device)
gen.manual_seed(106)
i = torch.arange(STEPS, dtype=torch.float64, device=device)
sigmas = (SIGMA_MAX ** (1 / RHO) + i / (STEPS - 1) * (SIGMA_MIN ** (1 / RHO) - SIGMA_MAX ** (1 / RHO))) ** RHO
sigmas = torch.cat([sigmas, torch.zeros(1, dtype=torch.float64, device=device)])
net.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    labels = torch.randint(0, CLASSES, (SB,), device=device, generator=gen)
    y2 = torch.cat([labels, torch.full_like(labels, CLASSES)])

    def guided(x, s):
        d = denoise(net, torch.cat([x, x]), s.float().expand(2 * SB), y2)
        cond, uncond = d.chunk(2)
        return uncond + 4.0 * (cond - uncond)

    x = torch.randn(SB, CH, RES, RES, device=device, generator=gen, dtype=torch.float64) * sigmas[0]
    for k in range(STEPS):
        s, s_next = sigmas[k], sigmas[k + 1]
        d = (x - guided(x.float(), s)) / s
        x_next = x + (s_next - s) * d
        if k < STEPS - 1:
            d2 = (x_next - guided(x_next.float(), s_next)) / s_next
            x_next = x + (s_next - s) * (0.5 * d + 0.5 * d2)
        x = x_next
if device == "cuda":
    print(
        f"sample {x.std().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
