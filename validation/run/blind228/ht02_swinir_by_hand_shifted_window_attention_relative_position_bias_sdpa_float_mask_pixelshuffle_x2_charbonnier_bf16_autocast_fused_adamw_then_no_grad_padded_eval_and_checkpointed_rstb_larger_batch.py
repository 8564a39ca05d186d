"""SwinIR-style classical super-resolution (x2) by hand: a 3x3 shallow conv to 96 channels, 4 residual
Swin transformer blocks (RSTB), each of 4 Swin layers (window 8, heads 6, mlp ratio 2) and a 3x3 conv
with a residual, then conv + PixelShuffle(2) + conv. Window attention is written by hand: window
partition by view/permute, a relative position bias table [(2w-1)^2, heads] indexed by a registered
relative_position_index buffer, the shifted layers use torch.roll by -w/2 and the usual -100 attention
mask over the 9 shifted regions; bias and mask are summed into one float attn_mask passed to
F.scaled_dot_product_attention (the unshifted layers pass the bias alone).

Charbonnier loss (eps 1e-3). Fused AdamW lr 2e-4 betas (0.9, 0.99), weight decay 0 on norms and bias
tables. Phases: 4 steps under bf16 autocast at batch 16 on 64 x 64 LR patches; no_grad fp32 evaluation of
2 images of 250 x 250 padded by reflection to a multiple of 8 (window-sized) and cropped back;
3 steps with each RSTB under non-reentrant torch.utils.checkpoint at batch 32 (bf16 autocast);
inference_mode bf16 at 384 x 384. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2282)
device = "cuda"
WS = 8


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def window_partition(x, ws):
    b, h, w, c = x.shape
    x = x.view(b, h // ws, ws, w // ws, ws, c)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws * ws, c)


def window_reverse(win, ws, h, w):
    b = win.shape[0] // ((h // ws) * (w // ws))
    x = win.view(b, h // ws, w // ws, ws, ws, -1)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w, -1)


def shift_mask(h, w, ws, shift, dev):
    img = torch.zeros(1, h, w, 1, device=dev)
    cnt = 0
    for hs in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
        for wsl in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            img[:, hs, wsl, :] = cnt
            cnt += 1
    mw = window_partition(img, ws).squeeze(-1)
    m = mw.unsqueeze(1) - mw.unsqueeze(2)
    return m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0)


class WindowAttention(nn.Module):
    def __init__(self, dim, heads, ws):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.table = nn.Parameter(torch.zeros((2 * ws - 1) ** 2, heads))
        nn.init.trunc_normal_(self.table, std=0.02)
        coords = torch.stack(torch.meshgrid(torch.arange(ws), torch.arange(ws), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += ws - 1
        rel[:, :, 1] += ws - 1
        rel[:, :, 0] *= 2 * ws - 1
        self.register_buffer("index", rel.sum(-1), persistent=False)

    def forward(self, x, mask=None):
        bw, n, c = x.shape
        qkv = self.qkv(x).view(bw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1).unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            bias = (bias + mask.unsqueeze(1)).unsqueeze(0)  # [1, nW, heads, n, n]
            bias = bias.expand(bw // nw, -1, -1, -1, -1).reshape(bw, self.heads, n, n)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
        return self.proj(out.transpose(1, 2).reshape(bw, n, c))


class SwinLayer(nn.Module):
    def __init__(self, dim, heads, ws, shift):
        super().__init__()
        self.ws, self.shift = ws, shift
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, ws)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x, hw):
        h, w = hw
        b, L, c = x.shape
        sc = x
        x = self.norm1(x).view(b, h, w, c)
        mask = None
        if self.shift:
            x = torch.roll(x, (-self.shift, -self.shift), (1, 2))
            mask = shift_mask(h, w, self.ws, self.shift, x.device)
        win = self.attn(window_partition(x, self.ws), mask)
        x = window_reverse(win, self.ws, h, w)
        if self.shift:
            x = torch.roll(x, (self.shift, self.shift), (1, 2))
        x = sc + x.reshape(b, L, c)
        return x + self.mlp(self.norm2(x))


class RSTB(nn.Module):
    def __init__(self, dim, heads, depth, ws):
        super().__init__()
        self.layers = nn.ModuleList(SwinLayer(dim, heads, ws, 0 if i % 2 == 0 else ws // 2) for i in range(depth))
        self.conv = nn.Conv2d(dim, dim, 3, 1, 1)

    def forward(self, x, hw):
        y = x
        for layer in self.layers:
            y = layer(y, hw)
        b, L, c = y.shape
        y = self.conv(y.transpose(1, 2).reshape(b, c, hw[0], hw[1])).flatten(2).transpose(1, 2)
        return x + y


class SwinIR(nn.Module):
    def __init__(self, dim=96, heads=6, depth=4, groups=4, ws=WS):
        super().__init__()
        self.conv_first = nn.Conv2d(3, dim, 3, 1, 1)
        self.blocks = nn.ModuleList(RSTB(dim, heads, depth, ws) for _ in range(groups))
        self.norm = nn.LayerNorm(dim)
        self.conv_after = nn.Conv2d(dim, dim, 3, 1, 1)
        self.up = nn.Sequential(nn.Conv2d(dim, 64, 3, 1, 1), nn.LeakyReLU(inplace=True),
                                nn.Conv2d(64, 4 * 64, 3, 1, 1), nn.PixelShuffle(2), nn.Conv2d(64, 3, 3, 1, 1))
        self.use_ckpt = False

    def forward(self, x):
        h, w = x.shape[-2:]
        f = self.conv_first(x)
        t = f.flatten(2).transpose(1, 2)
        for blk in self.blocks:
            if self.use_ckpt and self.training:
                t = checkpoint(blk, t, (h, w), use_reentrant=False)
            else:
                t = blk(t, (h, w))
        t = self.norm(t)
        b, L, c = t.shape
        f = f + self.conv_after(t.transpose(1, 2).reshape(b, c, h, w))
        return self.up(f) + F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


model = SwinIR().to(device)
decay, no_decay = [], []
for n, p in model.named_parameters():
    (no_decay if p.ndim == 1 or n.endswith("table") else decay).append(p)
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=2e-4, betas=(0.9, 0.99), fused=True)


def charbonnier(a, b, eps=1e-3):
    return torch.sqrt((a - b) ** 2 + eps * eps).mean()


def train(steps, bsz, lr_size=64):
    model.train()
    for _ in range(steps):
        hr = torch.rand(bsz, 3, lr_size * 2, lr_size * 2, device=device)
        lq = F.avg_pool2d(hr, 2)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            sr = model(lq)
        loss = charbonnier(sr.float(), hr)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"charbonnier {loss.item():.4f}")


train(4, 16)
report("bf16 train")

model.eval()
with torch.no_grad():
    lq = torch.rand(2, 3, 250, 250, device=device)
    ph, pw = (WS - 250 % WS) % WS, (WS - 250 % WS) % WS
    x = F.pad(lq, (0, pw, 0, ph), mode="reflect")
    sr = model(x)[..., : 250 * 2, : 250 * 2]
    psnr = -10 * torch.log10(((sr.clamp(0, 1) - F.interpolate(lq, scale_factor=2, mode="bicubic")) ** 2).mean())
print("eval", sr.shape, psnr.item())
del sr, x, lq, psnr
report("no_grad padded eval")

model.use_ckpt = True
train(3, 32)
report("checkpointed bf16 train")

opt.zero_grad(set_to_none=True)
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    sr = model(torch.rand(1, 3, 384, 384, device=device))
print("inference", sr.shape)
report("inference 384")
