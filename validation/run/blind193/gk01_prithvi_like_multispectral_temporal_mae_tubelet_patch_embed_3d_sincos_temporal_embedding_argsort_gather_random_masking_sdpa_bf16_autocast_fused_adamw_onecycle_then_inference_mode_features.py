"""A Prithvi-like (NASA/IBM HLS foundation model) masked autoencoder written by hand for multispectral
satellite time series, then its encoder used as a frozen feature extractor.

Input: 6 HLS bands (blue, green, red, narrow NIR, SWIR1, SWIR2) over 3 acquisition dates, 224 x 224 px
tiles, normalized per band on the device. Patch embedding by a Conv3d with a (1, 16, 16) tubelet (588
tokens of width 768 for 3 dates x 14 x 14), fixed 3-D sin-cos position embeddings (time, row, col) plus
a learned temporal embedding of the acquisition day-of-year (an MLP from the two sin/cos features of each
date). Random masking at 75% by argsort of uniform noise and torch.gather (147 visible tokens), a CLS
token. Encoder: 12 pre-norm blocks, 12 heads via F.scaled_dot_product_attention, MLP ratio 4, GELU.
Decoder: linear to 512, mask tokens scattered back with gather of ids_restore, 8 blocks of 16 heads,
linear to the 6 x 16 x 16 pixels of each tubelet; loss is the MSE on masked patches with per-patch
normalized targets (norm_pix_loss). Batch 32, bf16 autocast, fused AdamW (betas 0.9, 0.95, weight decay
0.05 on matrices only) under a OneCycleLR schedule, gradient clipping at 1.0.

Phases: the first training step; 5 more steps; feature extraction under torch.inference_mode and bf16
autocast for 128 tiles in chunks of 64 without masking (mean-pooled patch tokens moved to the host); then
a second training variant at 60% masking with two accumulated micro-batches of 16. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19301)
if SMALL:
    B, STEPS, IMG, DIM, DEPTH, DEC_DIM, DEC_DEPTH, EVAL_N, EVAL_CHUNK = 2, 1, 64, 96, 2, 64, 1, 4, 2
else:
    B, STEPS, IMG, DIM, DEPTH, DEC_DIM, DEC_DEPTH, EVAL_N, EVAL_CHUNK = 32, 5, 224, 768, 12, 512, 8, 128, 64
BANDS, T, PATCH = 6, 3, 16
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

BAND_MEAN = torch.tensor([775.2, 1080.9, 1228.6, 2497.2, 2204.2, 1610.8])
BAND_STD = torch.tensor([1281.5, 1270.0, 1399.5, 1368.3, 1291.6, 1154.5])


def sincos_1d(dim, pos):
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    out = pos.double().reshape(-1)[:, None] * omega[None]
    return torch.cat([out.sin(), out.cos()], 1).float()


def sincos_3d(dim, t, h, w):
    w_t, w_s = dim // 4, 3 * dim // 8
    gt, gh, gw = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij")
    return torch.cat([sincos_1d(w_t, gt), sincos_1d(w_s, gh), sincos_1d(w_s, gw)], 1)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class PrithviMAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.grid = (T, IMG // PATCH, IMG // PATCH)
        n = T * (IMG // PATCH) ** 2
        self.patch_embed = nn.Conv3d(BANDS, DIM, (1, PATCH, PATCH), (1, PATCH, PATCH))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.register_buffer("pos", sincos_3d(DIM, *self.grid)[None])
        self.date_mlp = nn.Sequential(nn.Linear(2, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.blocks = nn.ModuleList(Block(DIM, 12 if not SMALL else 4) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.dec_embed = nn.Linear(DIM, DEC_DIM)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, DEC_DIM))
        self.register_buffer("dec_pos", sincos_3d(DEC_DIM, *self.grid)[None])
        self.dec_blocks = nn.ModuleList(Block(DEC_DIM, 16 if not SMALL else 4) for _ in range(DEC_DEPTH))
        self.dec_norm = nn.LayerNorm(DEC_DIM, eps=1e-6)
        self.dec_pred = nn.Linear(DEC_DIM, BANDS * PATCH * PATCH)
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)
        self.n = n

    def date_embed(self, doy):
        ang = doy.float() / 365.0 * 2 * math.pi
        e = self.date_mlp(torch.stack([ang.sin(), ang.cos()], -1))  # B, T, D
        hw = self.n // T
        return e[:, :, None, :].expand(-1, -1, hw, -1).reshape(doy.shape[0], self.n, -1)

    def encode(self, x, doy, mask_ratio):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = x + self.pos + self.date_embed(doy)
        b, n, d = x.shape
        keep = int(n * (1 - mask_ratio))
        noise = torch.rand(b, n, device=x.device)
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :keep]
        x = torch.gather(x, 1, ids_keep[..., None].expand(-1, -1, d))
        mask = torch.ones(b, n, device=x.device)
        mask[:, :keep] = 0
        mask = torch.gather(mask, 1, ids_restore)
        x = torch.cat([self.cls_token.expand(b, -1, -1), x], 1)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x), mask, ids_restore

    def decode(self, x, ids_restore):
        x = self.dec_embed(x)
        b, n1, d = x.shape
        mask_tokens = self.mask_token.expand(b, ids_restore.shape[1] + 1 - n1, -1)
        y = torch.cat([x[:, 1:], mask_tokens], 1)
        y = torch.gather(y, 1, ids_restore[..., None].expand(-1, -1, d))
        y = y + self.dec_pos
        x = torch.cat([x[:, :1], y], 1)
        for blk in self.dec_blocks:
            x = blk(x)
        return self.dec_pred(self.dec_norm(x))[:, 1:]

    def patchify(self, imgs):
        b = imgs.shape[0]
        t, h, w = self.grid
        x = imgs.reshape(b, BANDS, t, h, PATCH, w, PATCH)
        return torch.einsum("bctkpwq->btkwpqc", x).reshape(b, t * h * w, PATCH * PATCH * BANDS)

    def forward(self, imgs, doy, mask_ratio=0.75):
        latent, mask, ids_restore = self.encode(imgs, doy, mask_ratio)
        pred = self.decode(latent, ids_restore)
        target = self.patchify(imgs)
        mean = target.mean(-1, keepdim=True)
        var = target.var(-1, keepdim=True)
        target = (target - mean) / (var + 1e-6) ** 0.5
        loss = ((pred.float() - target) ** 2).mean(-1)
        return (loss * mask).sum() / mask.sum()


def hls_batch(n):
    raw = torch.randint(0, 10000, (n, BANDS, T, IMG, IMG), dtype=torch.int16, device=device)
    x = (raw.float() - BAND_MEAN.to(device)[None, :, None, None, None]) / BAND_STD.to(device)[
        None, :, None, None, None
    ]
    doy = torch.sort(torch.randint(1, 366, (n, T), device=device), dim=1).values
    return x, doy


model = PrithviMAE().to(device)
decay = [p for p in model.parameters() if p.ndim >= 2]
no_decay = [p for p in model.parameters() if p.ndim < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1.5e-4,
    betas=(0.9, 0.95),
    fused=amp,
)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.5e-4, total_steps=STEPS + 10, pct_start=0.2)
print(f"Prithvi-like MAE params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def train_step(mask_ratio=0.75, micro=1):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(micro):
        x, doy = hls_batch(B // micro)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(x, doy, mask_ratio) / micro
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    return total


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f} lr {sched.get_last_lr()[0]:.2e}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
feats = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _i in range(0, EVAL_N, EVAL_CHUNK):
        x, doy = hls_batch(EVAL_CHUNK)
        latent, _, _ = model.encode(x, doy, 0.0)
        feats.append(latent[:, 1:].mean(1).float().cpu())
feats = torch.cat(feats)
print(f"features {tuple(feats.shape)} norm {feats.norm(dim=1).mean():.3f}")
if device == "cuda":
    print(f"feature peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    loss = train_step(mask_ratio=0.6, micro=2)
    print(f"60% mask step {step} loss {loss:.4f}")
if device == "cuda":
    print(
        f"60% mask allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
