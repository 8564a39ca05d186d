"""A Point-E-like point cloud diffusion model (Nichol et al. 2022) by hand: a transformer denoiser over
coloured points (xyz + rgb, 6 channels) conditioned on a grid of image features, trained with the epsilon
objective, sampled with DDIM and classifier-free guidance, then an upsampler stage.

Base model: width 512, 12 pre-LN blocks of 8 heads (F.scaled_dot_product_attention without a mask, GELU
MLP of 2048), the sequence [timestep token, 256 projected 1024-wide image-grid tokens (a CLIP ViT-L/14
grid of random features), 1,024 point tokens], cosine noise schedule of 1,024 steps, the image tokens
zeroed for 10% of the batch (classifier-free dropout by a fixed mask), MSE on the noise. bf16 autocast,
fused AdamW with weight decay on matrices only, gradient clipping, batch 32.

Upsampler: the same transformer at width 384, 8 blocks, conditioned on the 1,024 low-resolution points
(projected, prefixed) and on up to 77 text-like tokens with a key padding mask (each prompt its own
length, built as a boolean SDPA mask of (batch, 1, 1, keys)), denoising 3,072 new points (4,173 tokens);
every block under torch.utils.checkpoint (non-reentrant), bf16 autocast, foreach AdamW, batch 12.

Phases: 3 base training steps; DDIM sampling of 16 point clouds in 16 steps with guidance 3.0 (cond and
uncond in one batch of 32) under inference_mode; 3 upsampler training steps; then empty_cache() and
upsampler DDIM sampling of 4 clouds in 8 steps under inference_mode. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2124)
if SMALL:
    BATCH, POINTS, GRID, UP_BATCH, UP_POINTS, WIDTH, UP_WIDTH, LAYERS, UP_LAYERS = 4, 64, 16, 2, 128, 64, 64, 2, 2
else:
    BATCH, POINTS, GRID, UP_BATCH, UP_POINTS, WIDTH, UP_WIDTH, LAYERS, UP_LAYERS = 32, 1024, 256, 12, 3072, 512, 384, 12, 8
TEXT = 77
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self, width, heads=8):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x, mask=None):
        b, n, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, c))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class PointDiffusionTransformer(nn.Module):
    def __init__(self, width, layers, cond_dim, low_res=False, text=False):
        super().__init__()
        self.width = width
        self.time = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.cond_ln = nn.LayerNorm(cond_dim)
        self.cond = nn.Linear(cond_dim, width)
        self.low = nn.Linear(6, width) if low_res else None
        self.text = nn.Embedding(1000, width) if text else None
        self.inp = nn.Linear(6, width)
        self.ln_pre = nn.LayerNorm(width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(layers)])
        self.ln_post = nn.LayerNorm(width)
        self.out = nn.Linear(width, 6)

    def forward(self, x, t, cond, low=None, tokens=None, mask=None, use_ckpt=False):
        parts = [self.time(timestep_embedding(t, self.width))[:, None], self.cond(self.cond_ln(cond))]
        if self.low is not None:
            parts.append(self.low(low))
        if self.text is not None:
            parts.append(self.text(tokens))
        prefix = sum(p.shape[1] for p in parts)
        h = self.ln_pre(torch.cat(parts + [self.inp(x)], dim=1))
        for blk in self.blocks:
            h = checkpoint(blk, h, mask, use_reentrant=False) if use_ckpt else blk(h, mask)
        return self.out(self.ln_post(h[:, prefix:]))


def cosine_alpha_bar(steps=1024):
    s = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, 0).float().to(device)


alpha_bar = cosine_alpha_bar()
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def make_opt(model, fused):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]
    if fused and device == "cuda":
        return torch.optim.AdamW(groups, lr=1e-4, fused=True)
    return torch.optim.AdamW(groups, lr=1e-4, foreach=True)


def text_batch(n):
    lengths = torch.tensor([TEXT - 9 * (i % 8) for i in range(n)])
    tokens = torch.randint(0, 1000, (n, TEXT), device=device)
    keep = (torch.arange(TEXT)[None] < lengths[:, None]).to(device)
    return tokens, keep


base = PointDiffusionTransformer(WIDTH, LAYERS, 1024).to(device)
opt = make_opt(base, fused=True)
drop = (torch.arange(BATCH) % 10 == 0).to(device)

for step in range(3):
    x0 = torch.rand(BATCH, POINTS, 6, device=device) * 2 - 1
    cond = torch.randn(BATCH, GRID, 1024, device=device).masked_fill(drop[:, None, None], 0.0)
    t = torch.randint(0, 1024, (BATCH,), device=device)
    noise = torch.randn_like(x0)
    ab = alpha_bar[t].view(-1, 1, 1)
    xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
    with torch.autocast(**amp):
        pred = base(xt, t, cond)
        loss = F.mse_loss(pred.float(), noise)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(base.parameters(), 1.0)
    opt.step()
print(f"base loss {loss.item():.4f}")
report("base train")


def ddim(model, shape, steps, guidance, cond, **kw):
    x = torch.randn(shape, device=device)
    ts = torch.linspace(1023, 0, steps, device=device).long()
    for i, t in enumerate(ts):
        tt = t.expand(shape[0] * 2)
        with torch.autocast(**amp):
            kw2 = {k: torch.cat([v, v]) if torch.is_tensor(v) else v for k, v in kw.items()}
            eps = model(torch.cat([x, x]), tt, torch.cat([cond, torch.zeros_like(cond)]), **kw2).float()
        eps_c, eps_u = eps.chunk(2)
        eps = eps_u + guidance * (eps_c - eps_u)
        ab = alpha_bar[t]
        ab_prev = alpha_bar[ts[i + 1]] if i + 1 < steps else torch.ones_like(ab)
        x0 = ((x - (1 - ab).sqrt() * eps) / ab.sqrt()).clamp(-1, 1)
        x = ab_prev.sqrt() * x0 + (1 - ab_prev).sqrt() * eps
    return x


base.eval()
with torch.inference_mode():
    clouds = ddim(base, (16, POINTS, 6), 16, 3.0, torch.randn(16, GRID, 1024, device=device))
    print(f"sampled {tuple(clouds.shape)} mean {clouds.mean().item():.4f}")
report("base sample")

up = PointDiffusionTransformer(UP_WIDTH, UP_LAYERS, 1024, low_res=True, text=True).to(device)
up_opt = make_opt(up, fused=False)
for step in range(3):
    low = torch.rand(UP_BATCH, POINTS, 6, device=device) * 2 - 1
    x0 = torch.rand(UP_BATCH, UP_POINTS, 6, device=device) * 2 - 1
    cond = torch.randn(UP_BATCH, GRID, 1024, device=device)
    tokens, keep = text_batch(UP_BATCH)
    n = 1 + GRID + POINTS + TEXT + UP_POINTS
    mask = torch.ones(UP_BATCH, 1, 1, n, dtype=torch.bool, device=device)
    mask[:, 0, 0, 1 + GRID + POINTS : 1 + GRID + POINTS + TEXT] = keep
    t = torch.randint(0, 1024, (UP_BATCH,), device=device)
    noise = torch.randn_like(x0)
    ab = alpha_bar[t].view(-1, 1, 1)
    with torch.autocast(**amp):
        pred = up(ab.sqrt() * x0 + (1 - ab).sqrt() * noise, t, cond, low=low, tokens=tokens, mask=mask, use_ckpt=True)
        loss = F.mse_loss(pred.float(), noise)
    up_opt.zero_grad(set_to_none=True)
    loss.backward()
    up_opt.step()
print(f"upsampler loss {loss.item():.4f}")
report("upsampler train")

del opt, base
if device == "cuda":
    torch.cuda.empty_cache()
up.eval()
with torch.inference_mode():
    tokens, keep = text_batch(4)
    n = 1 + GRID + POINTS + TEXT + UP_POINTS
    mask = torch.ones(4, 1, 1, n, dtype=torch.bool, device=device)
    mask[:, 0, 0, 1 + GRID + POINTS : 1 + GRID + POINTS + TEXT] = keep
    dense = ddim(up, (4, UP_POINTS, 6), 8, 3.0, torch.randn(4, GRID, 1024, device=device), low=clouds[:4], tokens=tokens, mask=mask)
    print(f"upsampled {tuple(torch.cat([clouds[:4], dense], 1).shape)}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
