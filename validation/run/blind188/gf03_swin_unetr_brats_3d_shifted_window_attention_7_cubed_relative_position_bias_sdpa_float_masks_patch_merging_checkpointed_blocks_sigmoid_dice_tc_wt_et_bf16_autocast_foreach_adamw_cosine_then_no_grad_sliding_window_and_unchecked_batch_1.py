"""Swin-UNETR (Hatamizadeh et al. 2022) written by hand after MONAI's networks.nets.SwinUNETR, for BraTS: 4
MRI modalities in, 3 sigmoid channels out (tumour core, whole tumour, enhancing tumour), 96 x 96 x 96 crops,
feature_size 48.

Swin transformer encoder: Conv3d patch embedding (k = s = 2, 48 channels), 4 stages of 2 Swin blocks (heads 3,
6, 12, 24) on channels-last (B, D, H, W, C) volumes: LayerNorm, zero padding to a multiple of the 7 x 7 x 7
window, cyclic torch.roll by 3 in the second block of each stage with MONAI's region mask, window partition,
attention with a learned relative position bias table (13^3 x heads) passed with the shift mask as a float
attn_mask to F.scaled_dot_product_attention, window reverse, GELU MLP; PatchMerging (8 neighbours
concatenated, LayerNorm, Linear 8C -> 2C) after each stage; the 5 hidden states are layer-normalised.
Every Swin block runs under torch.utils.checkpoint (use_reentrant=False), MONAI's use_checkpoint=True.
Decoder: UnetrBasicBlocks (residual Conv3d k 3 + InstanceNorm3d + LeakyReLU) on the input and the hidden
states, UnetrUpBlocks (ConvTranspose3d k 2 s 2, torch.cat skip, residual block), 1x1x1 head.

Loss: soft Dice on sigmoid outputs (smooth_dr 1e-5, per channel, batch mean). Training: bf16 autocast,
AdamW(foreach, lr 1e-4, weight decay 1e-5) with CosineAnnealingLR, batch 2. Phases: the first step; 3 more;
validation under torch.no_grad (bf16 autocast, sliding windows of 96^3 with overlap 0.5, uniform blend, batch
of 4 windows) over one 4 x 144 x 144 x 112 volume, thresholded at 0.5 and moved to the host; then one step
at batch 1 with checkpointing switched off. 4 phases."""

import itertools
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(188_03)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    ROI, BATCH, STEPS, VOL, FS = 64, 1, 1, (80, 80, 64), 12
else:
    ROI, BATCH, STEPS, VOL, FS = 96, 2, 3, (144, 144, 112), 48
IN_CH, OUT_CH = 4, 3
WINDOW = (7, 7, 7)
HEADS = (3, 6, 12, 24)


def get_window_size(x_size, window_size, shift_size):
    use_window, use_shift = list(window_size), list(shift_size)
    for i in range(len(x_size)):
        if x_size[i] <= window_size[i]:
            use_window[i] = x_size[i]
            use_shift[i] = 0
    return tuple(use_window), tuple(use_shift)


def window_partition(x, ws):
    b, d, h, w, c = x.shape
    x = x.view(b, d // ws[0], ws[0], h // ws[1], ws[1], w // ws[2], ws[2], c)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).contiguous().view(-1, ws[0] * ws[1] * ws[2], c)


def window_reverse(windows, ws, dims):
    b, d, h, w = dims
    x = windows.view(b, d // ws[0], h // ws[1], w // ws[2], ws[0], ws[1], ws[2], -1)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).contiguous().view(b, d, h, w, -1)


def compute_mask(dims, ws, ss, dev):
    d, h, w = dims
    img_mask = torch.zeros((1, d, h, w, 1), device=dev)
    cnt = 0
    for a in (slice(-ws[0]), slice(-ws[0], -ss[0]), slice(-ss[0], None)):
        for b in (slice(-ws[1]), slice(-ws[1], -ss[1]), slice(-ss[1], None)):
            for c in (slice(-ws[2]), slice(-ws[2], -ss[2]), slice(-ss[2], None)):
                img_mask[:, a, b, c, :] = cnt
                cnt += 1
    mask_windows = window_partition(img_mask, ws).squeeze(-1)
    attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    return attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0)


class WindowAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        n = [2 * w - 1 for w in WINDOW]
        self.relative_position_bias_table = nn.Parameter(torch.zeros(n[0] * n[1] * n[2], heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        coords = torch.stack(torch.meshgrid(*[torch.arange(w) for w in WINDOW], indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += WINDOW[0] - 1
        rel[:, :, 1] += WINDOW[1] - 1
        rel[:, :, 2] += WINDOW[2] - 1
        rel[:, :, 0] *= (2 * WINDOW[1] - 1) * (2 * WINDOW[2] - 1)
        rel[:, :, 1] *= 2 * WINDOW[2] - 1
        self.register_buffer("relative_position_index", rel.sum(-1), persistent=False)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, mask):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        idx = self.relative_position_index.clone()[:n, :n].reshape(-1)
        bias = self.relative_position_bias_table[idx].reshape(n, n, -1).permute(2, 0, 1).contiguous()
        if mask is not None:
            nw = mask.shape[0]
            attn_mask = bias.unsqueeze(0) + mask.unsqueeze(1).to(bias.dtype)
            attn_mask = attn_mask.unsqueeze(0).expand(b // nw, -1, -1, -1, -1).reshape(b, self.heads, n, n)
        else:
            attn_mask = bias.unsqueeze(0)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


class SwinBlock(nn.Module):
    def __init__(self, dim, heads, shift):
        super().__init__()
        self.shift = tuple(w // 2 for w in WINDOW) if shift else (0, 0, 0)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward_part1(self, x, mask):
        b, d, h, w, c = x.shape
        ws, ss = get_window_size((d, h, w), WINDOW, self.shift)
        x = self.norm1(x)
        pd, ph, pw = [(ws[i] - s % ws[i]) % ws[i] for i, s in enumerate((d, h, w))]
        x = F.pad(x, (0, 0, 0, pw, 0, ph, 0, pd))
        _, dp, hp, wp, _ = x.shape
        if any(i > 0 for i in ss):
            x = torch.roll(x, shifts=(-ss[0], -ss[1], -ss[2]), dims=(1, 2, 3))
            attn_mask = mask
        else:
            attn_mask = None
        windows = self.attn(window_partition(x, ws), attn_mask)
        x = window_reverse(windows.view(-1, *ws, c), ws, (b, dp, hp, wp))
        if any(i > 0 for i in ss):
            x = torch.roll(x, shifts=ss, dims=(1, 2, 3))
        return x[:, :d, :h, :w, :].contiguous()

    def forward_part2(self, x):
        return self.mlp(self.norm2(x))

    def forward(self, x, mask, use_checkpoint):
        if use_checkpoint:
            x = x + checkpoint(self.forward_part1, x, mask, use_reentrant=False)
            x = x + checkpoint(self.forward_part2, x, use_reentrant=False)
        else:
            x = x + self.forward_part1(x, mask)
            x = x + self.forward_part2(x)
        return x


class PatchMerging(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(8 * dim)
        self.reduction = nn.Linear(8 * dim, 2 * dim, bias=False)

    def forward(self, x):
        parts = [x[:, i::2, j::2, k::2, :] for i, j, k in itertools.product(range(2), range(2), range(2))]
        return self.reduction(self.norm(torch.cat(parts, -1)))


class BasicLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.blocks = nn.ModuleList([SwinBlock(dim, heads, False), SwinBlock(dim, heads, True)])
        self.downsample = PatchMerging(dim)

    def forward(self, x, use_checkpoint):
        b, _, d, h, w = x.shape
        ws, ss = get_window_size((d, h, w), WINDOW, tuple(s // 2 for s in WINDOW))
        x = x.permute(0, 2, 3, 4, 1)
        dp, hp, wp = [math.ceil(s / ws[i]) * ws[i] for i, s in enumerate((d, h, w))]
        mask = compute_mask((dp, hp, wp), ws, ss, x.device)
        for blk in self.blocks:
            x = blk(x, mask, use_checkpoint)
        x = self.downsample(x.view(b, d, h, w, -1))
        return x.permute(0, 4, 1, 2, 3)


class SwinViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv3d(IN_CH, FS, 2, stride=2)
        self.layers = nn.ModuleList(BasicLayer(FS * 2**i, HEADS[i]) for i in range(4))
        self.use_checkpoint = True

    @staticmethod
    def proj_out(x):
        x = x.permute(0, 2, 3, 4, 1)
        x = F.layer_norm(x, [x.shape[-1]])
        return x.permute(0, 4, 1, 2, 3)

    def forward(self, x):
        x = self.patch_embed(x)
        outs = [self.proj_out(x)]
        for layer in self.layers:
            x = layer(x.contiguous(), self.use_checkpoint)
            outs.append(self.proj_out(x))
        return outs


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, padding=1, bias=False)
        self.norm1 = nn.InstanceNorm3d(cout)
        self.conv2 = nn.Conv3d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = nn.InstanceNorm3d(cout)
        self.lrelu = nn.LeakyReLU(0.01, inplace=True)
        self.conv3 = nn.Conv3d(cin, cout, 1, bias=False) if cin != cout else None
        self.norm3 = nn.InstanceNorm3d(cout) if cin != cout else None

    def forward(self, x):
        out = self.lrelu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        res = self.norm3(self.conv3(x)) if self.conv3 is not None else x
        out += res
        return self.lrelu(out)


class UpBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.transp_conv = nn.ConvTranspose3d(cin, cout, 2, stride=2, bias=False)
        self.conv_block = ResBlock(2 * cout, cout)

    def forward(self, x, skip):
        return self.conv_block(torch.cat((self.transp_conv(x), skip), 1))


class SwinUNETR(nn.Module):
    def __init__(self):
        super().__init__()
        self.swinViT = SwinViT()
        self.encoder1 = ResBlock(IN_CH, FS)
        self.encoder2 = ResBlock(FS, FS)
        self.encoder3 = ResBlock(2 * FS, 2 * FS)
        self.encoder4 = ResBlock(4 * FS, 4 * FS)
        self.encoder10 = ResBlock(16 * FS, 16 * FS)
        self.decoder5 = UpBlock(16 * FS, 8 * FS)
        self.decoder4 = UpBlock(8 * FS, 4 * FS)
        self.decoder3 = UpBlock(4 * FS, 2 * FS)
        self.decoder2 = UpBlock(2 * FS, FS)
        self.decoder1 = UpBlock(FS, FS)
        self.out = nn.Conv3d(FS, OUT_CH, 1)

    def forward(self, x_in):
        hidden = self.swinViT(x_in)
        enc0 = self.encoder1(x_in)
        enc1 = self.encoder2(hidden[0])
        enc2 = self.encoder3(hidden[1])
        enc3 = self.encoder4(hidden[2])
        dec4 = self.encoder10(hidden[4])
        dec3 = self.decoder5(dec4, hidden[3])
        dec2 = self.decoder4(dec3, enc3)
        dec1 = self.decoder3(dec2, enc2)
        dec0 = self.decoder2(dec1, enc1)
        return self.out(self.decoder1(dec0, enc0))


def dice_loss(logits, target):
    p = torch.sigmoid(logits.float())
    dims = [2, 3, 4]
    inter = (p * target).sum(dims)
    denom = p.sum(dims) + target.sum(dims)
    return (1.0 - (2.0 * inter) / (denom + 1e-5)).mean()


model = SwinUNETR().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-5, foreach=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=300)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    x = torch.randn(n, IN_CH, ROI, ROI, ROI, device=device)
    y = (torch.rand(n, OUT_CH, ROI, ROI, ROI, device=device) > 0.7).float()
    return x, y


def train_step(n):
    x, y = batch(n)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
    loss = dice_loss(logits, y)
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
for step in range(STEPS + 1):
    print(f"step {step} dice loss {train_step(BATCH):.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
volume = torch.randn(1, IN_CH, *VOL, device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    interval = ROI // 2
    starts = [
        sorted({min(i * interval, s - ROI) for i in range(math.ceil((s - ROI) / interval) + 1)}) for s in VOL
    ]
    corners = list(itertools.product(*starts))
    out = torch.zeros(1, OUT_CH, *VOL, device=device)
    count = torch.zeros(1, 1, *VOL, device=device)
    for i in range(0, len(corners), 4):
        chunk = corners[i : i + 4]
        windows = torch.cat([volume[:, :, a : a + ROI, b : b + ROI, c : c + ROI] for a, b, c in chunk])
        probs = torch.sigmoid(model(windows).float())
        for j, (a, b, c) in enumerate(chunk):
            out[:, :, a : a + ROI, b : b + ROI, c : c + ROI] += probs[j : j + 1]
            count[:, :, a : a + ROI, b : b + ROI, c : c + ROI] += 1
    pred = (out / count > 0.5).to(torch.uint8).cpu()
print(f"windows {len(corners)} prediction {tuple(pred.shape)} voxels {int(pred.sum())}")
del out, count, probs, windows, volume
if device == "cuda":
    print(f"validation peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
model.swinViT.use_checkpoint = False
print(f"unchecked step dice loss {train_step(1):.4f}")
if device == "cuda":
    print(
        f"unchecked allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
