"""U-ViT (Bao et al., "All are Worth Words") for pixel-space diffusion on CIFAR-10-sized images, by hand.

Model (U-ViT-S/2-like): 32 x 32 x 3 images cut into 2 x 2 patches by a Conv2d (256 tokens of 512), the
timestep as one extra token (sinusoidal embedding -> Linear/SiLU/Linear), a learned position embedding
over 257 tokens, 13 transformer blocks (pre-LN, 8 heads, qkv without bias, SDPA, GELU MLP x4): 6 "in"
blocks whose outputs are kept, one mid block, and 6 "out" blocks that each first fuse the matching long
skip (torch.cat([x, skip], -1) -> Linear 1024 -> 512). Final LayerNorm, Linear to 2 x 2 x 3 pixels per
token, unpatchify, and a 3 x 3 Conv2d on the image as U-ViT's final layer.

Objective: DDPM epsilon prediction, 1,000 steps of the "scaled linear" beta schedule (sqrt-space linear
from 0.00085 to 0.012), MSE. Training in fp32 at 2 micro-batches of 128 per optimizer step (loss / 2,
gradient accumulation), AdamW foreach (lr 2e-4, betas (0.99, 0.999), weight decay 0.03) and an EMA of
the parameters by torch._foreach_lerp_ (decay 0.9999).

Then a no_grad evaluation of the EMA model's loss at batch 512 over 5 fixed timesteps; then DDIM sampling
(16 steps, eta 0) of 256 images from the EMA model under inference_mode and bf16 autocast. Then an
ImageNet-64 class-conditional variant (U-ViT-M/4-like: 64 x 64 x 3, 4 x 4 patches, a time token and a
label token, width 768, 17 blocks, 12 heads, each block run under torch.utils.checkpoint with
use_reentrant=False as U-ViT's use_checkpoint does) trained for one step at batch 128 under bf16
autocast with a fresh AdamW.

Phases: the first optimizer step; 2 more steps; EMA evaluation; DDIM sampling; the ImageNet-64 step.
5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2004)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    MICRO, ACCUM, STEPS, EVAL_B, SAMPLE_B, DDIM, B_IN = 4, 2, 1, 4, 2, 2, 2
    S_CFG = dict(img=32, patch=2, dim=64, depth=3, heads=4)
    M_CFG = dict(img=64, patch=4, dim=64, depth=3, heads=4)
else:
    MICRO, ACCUM, STEPS, EVAL_B, SAMPLE_B, DDIM, B_IN = 128, 2, 2, 512, 256, 16, 128
    S_CFG = dict(img=32, patch=2, dim=512, depth=13, heads=8)
    M_CFG = dict(img=64, patch=4, dim=768, depth=17, heads=12)
T = 1000


def report(tag):
    if device == "cuda":
        stats = torch.cuda.memory_stats()
        peak, current = stats["allocated_bytes.all.peak"], stats["allocated_bytes.all.current"]
        print(f"{tag}: peak {peak} current {current}")
        torch.cuda.reset_peak_memory_stats()


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half).to(
        device=t.device
    )
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads, skip=False, use_checkpoint=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.skip_linear = nn.Linear(2 * dim, dim) if skip else None
        self.use_checkpoint = use_checkpoint

    def forward(self, x, skip=None):
        if self.use_checkpoint:
            return torch.utils.checkpoint.checkpoint(self._forward, x, skip, use_reentrant=False)
        return self._forward(x, skip)

    def _forward(self, x, skip=None):
        if self.skip_linear is not None:
            x = self.skip_linear(torch.cat([x, skip], dim=-1))
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class UViT(nn.Module):
    def __init__(self, img, patch, dim, depth, heads, num_classes=-1, use_checkpoint=False):
        super().__init__()
        self.patch, self.img = patch, img
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.time_embed = nn.Sequential(nn.Linear(dim, 4 * dim), nn.SiLU(), nn.Linear(4 * dim, dim))
        self.label_emb = nn.Embedding(num_classes, dim) if num_classes > 0 else None
        self.extras = 2 if num_classes > 0 else 1
        self.pos_embed = nn.Parameter(torch.zeros(1, self.extras + (img // patch) ** 2, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.in_blocks = nn.ModuleList(
            [Block(dim, heads, use_checkpoint=use_checkpoint) for _ in range(depth // 2)]
        )
        self.mid_block = Block(dim, heads, use_checkpoint=use_checkpoint)
        self.out_blocks = nn.ModuleList(
            [Block(dim, heads, skip=True, use_checkpoint=use_checkpoint) for _ in range(depth // 2)]
        )
        self.norm = nn.LayerNorm(dim)
        self.decoder_pred = nn.Linear(dim, patch * patch * 3)
        self.final_layer = nn.Conv2d(3, 3, 3, padding=1)
        self.dim = dim

    def forward(self, x, timesteps, y=None):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        time_token = self.time_embed(timestep_embedding(timesteps, self.dim)).unsqueeze(1)
        extra = [time_token]
        if self.label_emb is not None:
            extra.append(self.label_emb(y).unsqueeze(1))
        x = torch.cat([*extra, x], dim=1) + self.pos_embed
        skips = []
        for blk in self.in_blocks:
            x = blk(x)
            skips.append(x)
        x = self.mid_block(x)
        for blk in self.out_blocks:
            x = blk(x, skips.pop())
        x = self.decoder_pred(self.norm(x))[:, self.extras :]
        g, p = self.img // self.patch, self.patch
        x = (
            x.reshape(x.shape[0], g, g, p, p, 3)
            .permute(0, 5, 1, 3, 2, 4)
            .reshape(x.shape[0], 3, self.img, self.img)
        )
        return self.final_layer(x)


betas = torch.linspace(0.00085**0.5, 0.012**0.5, T, dtype=torch.float64) ** 2
abar_all = torch.cumprod(1 - betas, 0).float().to(device)


def eps_loss(model, x0, t, y=None):
    noise = torch.randn_like(x0)
    a = abar_all[t].view(-1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    return F.mse_loss(model(xt, t, y), noise)


model = UViT(**S_CFG).to(device)
ema = UViT(**S_CFG).to(device).requires_grad_(False)
ema.load_state_dict(model.state_dict())
params = list(model.parameters())
ema_params = list(ema.parameters())
opt = torch.optim.AdamW(params, lr=2e-4, betas=(0.99, 0.999), weight_decay=0.03)
print(f"U-ViT-S/2 {sum(p.numel() for p in params) / 1e6:.1f} M parameters")


def optimizer_step():
    model.train()
    total = 0.0
    for _ in range(ACCUM):
        x0 = torch.rand(MICRO, 3, 32, 32, device=device) * 2 - 1
        t = torch.randint(0, T, (MICRO,), device=device)
        loss = eps_loss(model, x0, t) / ACCUM
        loss.backward()
        total += loss.item()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, params, 1 - 0.9999)
    return total


print(f"step 0 loss {optimizer_step():.4f}")
report("first step")
for _ in range(STEPS):
    loss = optimizer_step()
print(f"step {STEPS} loss {loss:.4f}")
report("train")

ema.eval()
with torch.no_grad():
    x0 = torch.rand(EVAL_B, 3, 32, 32, device=device) * 2 - 1
    vals = []
    for tv in (10, 250, 500, 750, 990):
        t = torch.full((EVAL_B,), tv, device=device, dtype=torch.long)
        vals.append(eps_loss(ema, x0, t).item())
print("ema eval " + " ".join(f"{v:.4f}" for v in vals))
report("eval")

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    ts = torch.linspace(T - 1, 0, DDIM).round().long().tolist()
    x = torch.randn(SAMPLE_B, 3, 32, 32, device=device)
    for i, t in enumerate(ts):
        a = abar_all[t]
        a_prev = abar_all[ts[i + 1]] if i + 1 < len(ts) else torch.ones((), device=device)
        eps = ema(x, torch.full((SAMPLE_B,), t, device=device)).float()
        x0_pred = ((x - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1, 1)
        x = a_prev.sqrt() * x0_pred + (1 - a_prev).sqrt() * eps
    imgs = ((x + 1) * 127.5).clamp(0, 255).to(torch.uint8).cpu()
print(f"sampled {tuple(imgs.shape)} mean {imgs.float().mean():.1f}")
report("ddim sampling")

model = ema = opt = params = ema_params = None
model = UViT(**M_CFG, num_classes=1000, use_checkpoint=True).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.99, 0.99), weight_decay=0.03)
model.train()
x0 = torch.rand(B_IN, 3, 64, 64, device=device) * 2 - 1
y = torch.randint(0, 1000, (B_IN,), device=device)
t = torch.randint(0, T, (B_IN,), device=device)
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    loss = eps_loss(model, x0, t, y)
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
print(f"imagenet64 loss {loss.item():.4f}")
if device == "cuda":
    print(f"imagenet64 peak {torch.cuda.max_memory_allocated()}")
