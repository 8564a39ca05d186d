"""Latent rectified-flow training of a hand-written MMDiT (SD3-style: separate weights for image
and text tokens, one joint scaled-dot-product attention over both streams, adaLN-Zero modulation
from the timestep and a pooled text vector), 12 blocks at 768 wide over 4x32x32 latents in 2x2
patches and 77 text tokens: two steps at batch 32 under bf16 autocast with logit-normal timesteps,
AdamW and an EMA copy updated by torch._foreach_lerp_, then 16 samples by 20 Euler steps with
classifier-free guidance (the batch doubled) from the EMA model under torch.inference_mode;
3 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9905)
if SMALL:
    DIM, DEPTH, HEADS, LAT, TXT, B, SAMPLES, STEPS = 64, 2, 4, 8, 7, 4, 2, 3
else:
    DIM, DEPTH, HEADS, LAT, TXT, B, SAMPLES, STEPS = 768, 12, 12, 32, 77, 32, 16, 20
CH, PATCH = 4, 2
device = "cuda" if torch.cuda.is_available() else "cpu"


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-torch.arange(half, device=t.device, dtype=torch.float32) * 9.21 / half)
    args = t[:, None] * 1000 * freqs[None]
    return torch.cat([args.cos(), args.sin()], dim=-1)


class Stream(nn.Module):
    def __init__(self):
        super().__init__()
        self.mod = nn.Linear(DIM, 6 * DIM)
        self.norm1 = nn.LayerNorm(DIM, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.q_norm = nn.RMSNorm(DIM // HEADS)
        self.k_norm = nn.RMSNorm(DIM // HEADS)
        self.proj = nn.Linear(DIM, DIM)
        self.norm2 = nn.LayerNorm(DIM, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU("tanh"), nn.Linear(4 * DIM, DIM))
        nn.init.zeros_(self.mod.weight)
        nn.init.zeros_(self.mod.bias)

    def pre(self, x, c):
        shift1, scale1, gate1, shift2, scale2, gate2 = self.mod(F.silu(c))[:, None].chunk(6, -1)
        h = self.norm1(x) * (1 + scale1) + shift1
        b, n, _ = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, HEADS, DIM // HEADS).unbind(2)
        return (self.q_norm(q), self.k_norm(k), v), (gate1, shift2, scale2, gate2)

    def post(self, x, attn, mods):
        gate1, shift2, scale2, gate2 = mods
        x = x + gate1 * self.proj(attn)
        return x + gate2 * self.mlp(self.norm2(x) * (1 + scale2) + shift2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = Stream()
        self.txt = Stream()

    def forward(self, x, ctx, c):
        (qi, ki, vi), mi = self.img.pre(x, c)
        (qt, kt, vt), mt = self.txt.pre(ctx, c)
        q = torch.cat([qt, qi], 1).transpose(1, 2)
        k = torch.cat([kt, ki], 1).transpose(1, 2)
        v = torch.cat([vt, vi], 1).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        at, ai = a.split([ctx.shape[1], x.shape[1]], dim=1)
        return self.img.post(x, ai, mi), self.txt.post(ctx, at, mt)


class MMDiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(CH, DIM, PATCH, PATCH)
        self.pos = nn.Parameter(torch.randn(1, (LAT // PATCH) ** 2, DIM) * 0.02)
        self.ctx_in = nn.Linear(DIM, DIM)
        self.t_mlp = nn.Sequential(nn.Linear(256, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.pool_mlp = nn.Sequential(nn.Linear(DIM, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.final_mod = nn.Linear(DIM, 2 * DIM)
        self.final_norm = nn.LayerNorm(DIM, elementwise_affine=False, eps=1e-6)
        self.out = nn.Linear(DIM, PATCH * PATCH * CH)

    def forward(self, x, t, ctx, pooled):
        b = x.shape[0]
        h = self.patch(x).flatten(2).transpose(1, 2) + self.pos
        ctx = self.ctx_in(ctx)
        c = self.t_mlp(timestep_embedding(t, 256)) + self.pool_mlp(pooled)
        for blk in self.blocks:
            h, ctx = blk(h, ctx, c)
        shift, scale = self.final_mod(F.silu(c))[:, None].chunk(2, -1)
        h = self.out(self.final_norm(h) * (1 + scale) + shift)
        g = LAT // PATCH
        h = h.view(b, g, g, PATCH, PATCH, CH).permute(0, 5, 1, 3, 2, 4)
        return h.reshape(b, CH, LAT, LAT)


model = MMDiT().to(device)
ema = copy.deepcopy(model).requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
params = list(model.parameters())
ema_params = list(ema.parameters())
if device == "cuda":
    print(f"model+ema {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    x0 = torch.randn(B, CH, LAT, LAT, device=device)
    ctx = torch.randn(B, TXT, DIM, device=device)
    pooled = torch.randn(B, DIM, device=device)
    drop = torch.rand(B, device=device) < 0.1
    ctx = ctx.masked_fill(drop[:, None, None], 0.0)
    t = torch.sigmoid(torch.randn(B, device=device))
    noise = torch.randn_like(x0)
    xt = (1 - t[:, None, None, None]) * x0 + t[:, None, None, None] * noise
    with torch.autocast(device, dtype=torch.bfloat16):
        pred = model(xt, t, ctx, pooled)
    loss = F.mse_loss(pred.float(), noise - x0)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, params, 1 - 0.999)
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda":
        print(
            f"train {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x0, ctx, pooled, drop, t, noise, xt, pred, loss

with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(SAMPLES, CH, LAT, LAT, device=device)
    ctx = torch.randn(SAMPLES, TXT, DIM, device=device)
    pooled = torch.randn(SAMPLES, DIM, device=device)
    ctx2 = torch.cat([ctx, torch.zeros_like(ctx)])
    pooled2 = torch.cat([pooled, torch.zeros_like(pooled)])
    ts = torch.linspace(1.0, 0.0, STEPS + 1, device=device)
    for k in range(STEPS):
        t = ts[k].expand(2 * SAMPLES)
        v = ema(torch.cat([x, x]), t, ctx2, pooled2).float()
        cond, uncond = v.chunk(2)
        v = uncond + 5.0 * (cond - uncond)
        x = x + (ts[k + 1] - ts[k]) * v
    print(f"sample std {x.std().item():.3f}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
