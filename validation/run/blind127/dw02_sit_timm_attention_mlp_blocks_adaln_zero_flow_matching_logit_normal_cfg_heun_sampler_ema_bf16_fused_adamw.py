"""A SiT (scalable interpolant transformer) as in the DiT/SiT repositories, built from timm parts:
timm.layers.PatchEmbed over 4 x 32 x 32 latents (patch 2), blocks of timm.layers.Attention (fused
SDPA, qk-norm) and timm.layers.Mlp (tanh GELU) under adaLN-Zero modulation from the timestep's
sinusoidal embedding plus a class embedding with a null class for classifier-free guidance
(10% label dropout); rectified-flow / linear interpolant training with logit-normal timesteps and
a velocity target, bf16 autocast, fused AdamW with weight decay groups, gradient clipping, an EMA
through torch._foreach_lerp_; then Heun ODE sampling with classifier-free guidance (scale 4, the
batch doubled with the null class) from the EMA model under inference_mode; batch 128, depth 12,
width 768 (SiT-B/2), 3 training steps, 5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import Attention, Mlp, PatchEmbed

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12702)
B, DEPTH, WIDTH, HEADS, NCLS, STEPS = (4, 2, 64, 4, 10, 3) if SMALL else (128, 12, 768, 12, 1000, 16)
LAT, PATCH, LCH = 32, 2, 4
device = "cuda" if torch.cuda.is_available() else "cpu"


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class TimestepEmbedder(nn.Module):
    def __init__(self, dim, freq=256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(freq, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.freq = freq

    def forward(self, t):
        half = self.freq // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
        args = t[:, None].float() * 1000 * freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], -1))


class SiTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, num_heads=heads, qkv_bias=True, qk_norm=True, norm_layer=nn.LayerNorm)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(dim, hidden_features=4 * dim, act_layer=lambda: nn.GELU(approximate="tanh"))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        nn.init.zeros_(self.ada[-1].weight)
        nn.init.zeros_(self.ada[-1].bias)

    def forward(self, x, c):
        s1, sc1, g1, s2, sc2, g2 = self.ada(c).chunk(6, dim=1)
        x = x + g1.unsqueeze(1) * self.attn(modulate(self.norm1(x), s1, sc1))
        return x + g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), s2, sc2))


class SiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.x_embed = PatchEmbed(LAT, PATCH, LCH, WIDTH)
        n = self.x_embed.num_patches
        self.pos = nn.Parameter(torch.zeros(1, n, WIDTH), requires_grad=False)
        self.t_embed = TimestepEmbedder(WIDTH)
        self.y_embed = nn.Embedding(NCLS + 1, WIDTH)
        self.blocks = nn.ModuleList(SiTBlock(WIDTH, HEADS) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(WIDTH, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(WIDTH, 2 * WIDTH))
        self.head = nn.Linear(WIDTH, PATCH * PATCH * LCH)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def unpatchify(self, x):
        h = w = LAT // PATCH
        x = x.reshape(x.shape[0], h, w, PATCH, PATCH, LCH)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(x.shape[0], LCH, LAT, LAT)

    def forward(self, x, t, y):
        x = self.x_embed(x) + self.pos
        c = self.t_embed(t) + self.y_embed(y)
        for blk in self.blocks:
            x = blk(x, c)
        shift, scale = self.ada(c).chunk(2, dim=1)
        return self.unpatchify(self.head(modulate(self.norm(x), shift, scale)))


model = SiT().to(device)
ema = copy.deepcopy(model).requires_grad_(False)
decay, no_decay = [], []
for n, p in model.named_parameters():
    if p.requires_grad:
        (no_decay if p.dim() < 2 or "embed" in n else decay).append(p)
fused = device == "cuda"
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-4,
    betas=(0.9, 0.95),
    fused=fused,
)
latents = torch.randn(4 * B, LCH, LAT, LAT, device=device) * 0.18215
labels = torch.randint(0, NCLS, (4 * B,), device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    idx = torch.randint(0, 4 * B, (B,), device=device)
    x1, y = latents[idx], labels[idx]
    y = torch.where(torch.rand(B, device=device) < 0.1, torch.full_like(y, NCLS), y)
    t = torch.sigmoid(torch.randn(B, device=device))
    x0 = torch.randn_like(x1)
    xt = (1 - t[:, None, None, None]) * x0 + t[:, None, None, None] * x1
    with torch.autocast(device, dtype=torch.bfloat16):
        v = model(xt, t, y)
    loss = F.mse_loss(v.float(), x1 - x0)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        ep = [p for p in ema.parameters()]
        mp = [p.detach() for p in model.parameters()]
        torch._foreach_lerp_(ep, mp, 1 - 0.9999)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x1, y, t, x0, xt, v, loss, gnorm

ema.eval()
n = B // 2
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(n, LCH, LAT, LAT, device=device)
    y = torch.randint(0, NCLS, (n,), device=device)
    y_in = torch.cat([y, torch.full_like(y, NCLS)])
    ts = torch.linspace(0, 1, STEPS + 1, device=device)

    def velocity(x, t):
        out = ema(torch.cat([x, x]), t.expand(2 * n), y_in).float()
        cond, uncond = out.chunk(2)
        return uncond + 4.0 * (cond - uncond)

    for i in range(STEPS):
        dt = ts[i + 1] - ts[i]
        d = velocity(x, ts[i])
        x_pred = x + dt * d
        if i < STEPS - 1:
            x = x + dt * 0.5 * (d + velocity(x_pred, ts[i + 1]))
        else:
            x = x_pred
if device == "cuda":
    print(
        f"sample std {x.std().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke sample {tuple(x.shape)}")
