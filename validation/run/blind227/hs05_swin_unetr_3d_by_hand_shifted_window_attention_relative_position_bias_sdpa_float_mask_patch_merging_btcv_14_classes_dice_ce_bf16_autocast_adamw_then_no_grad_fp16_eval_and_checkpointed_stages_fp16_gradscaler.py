"""A Swin-UNETR-like network (Hatamizadeh et al. 2022) written by hand for 14-class abdominal CT (BTCV style):
Conv3d patch embedding (2^3 patches, 48 channels) of a 96^3 crop, four Swin stages (depths 2-2-2-2, heads
3-6-12-24) of 3-D window attention over 6^3 windows with a learned relative position bias table of
(2*6-1)^3 entries, every second block cyclically shifted by torch.roll with the Swin region mask, attention by
F.scaled_dot_product_attention with the bias and shift mask combined into one float attn_mask per window,
patch merging (8 neighbours concatenated, LayerNorm, Linear 8C -> 2C) after every stage; residual
Conv3d-InstanceNorm3d-LeakyReLU encoder blocks on the input and on every hidden state and a ConvTranspose3d
decoder with skip concatenation back to 96^3. Loss: soft Dice over softmax (background included) + CE.

Phases: 3 steps under bf16 autocast at batch 2 with AdamW (foreach, lr 1e-4, weight decay 1e-5); no_grad
evaluation under fp16 autocast at batch 4 (argmax labels as uint8); then torch.cuda.empty_cache(), each Swin
stage run through torch.utils.checkpoint (non-reentrant, as Swin-UNETR's use_checkpoint) and 3 steps under
fp16 autocast with GradScaler at batch 4 with the same AdamW. 3 phases."""

import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2275)
device = "cuda"
NC, FS, W = 14, 48, 6
DEPTHS, HEADS = (2, 2, 2, 2), (3, 6, 12, 24)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def window_partition(x):  # (B, D, H, W, C) -> (B * nW, W^3, C)
    B, D, H, Wd, C = x.shape
    x = x.view(B, D // W, W, H // W, W, Wd // W, W, C).permute(0, 1, 3, 5, 2, 4, 6, 7)
    return x.reshape(-1, W ** 3, C)


def window_reverse(w, B, D, H, Wd):
    C = w.shape[-1]
    x = w.view(B, D // W, H // W, Wd // W, W, W, W, C).permute(0, 1, 4, 2, 5, 3, 6, 7)
    return x.reshape(B, D, H, Wd, C)


def shift_mask(r, s):
    img = torch.zeros(1, r, r, r, 1, device=device)
    sl = (slice(0, -W), slice(-W, -s), slice(-s, None))
    for cnt, (a, b, c) in enumerate(itertools.product(sl, sl, sl)):
        img[:, a, b, c, :] = cnt
    mw = window_partition(img).squeeze(-1)
    m = mw[:, None, :] - mw[:, :, None]
    return m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0)  # (nW, N, N)


coords = torch.stack(torch.meshgrid(*[torch.arange(W)] * 3, indexing="ij")).flatten(1)
rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (W - 1)
REL_INDEX = (rel[..., 0] * (2 * W - 1) ** 2 + rel[..., 1] * (2 * W - 1) + rel[..., 2]).to(device)


class SwinBlock(nn.Module):
    def __init__(self, dim, heads, shift):
        super().__init__()
        self.heads, self.shift = heads, shift
        self.n1, self.n2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.table = nn.Parameter(torch.randn((2 * W - 1) ** 3, heads) * 0.02)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        B, D, H, Wd, C = x.shape
        h = self.n1(x)
        if self.shift:
            h = torch.roll(h, (-self.shift,) * 3, (1, 2, 3))
        w = window_partition(h)
        nB, N, _ = w.shape
        q, k, v = self.qkv(w).view(nB, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.table[REL_INDEX.view(-1)].view(N, N, -1).permute(2, 0, 1)  # (h, N, N)
        if self.shift:
            m = (bias[None] + mask[:, None]).repeat(B, 1, 1, 1)  # (B * nW, h, N, N)
        else:
            m = bias[None]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=m.to(q.dtype))
        a = self.proj(a.transpose(1, 2).reshape(nB, N, C))
        a = window_reverse(a, B, D, H, Wd)
        if self.shift:
            a = torch.roll(a, (self.shift,) * 3, (1, 2, 3))
        x = x + a
        return x + self.mlp(self.n2(x))


class Stage(nn.Module):
    def __init__(self, dim, depth, heads, res):
        super().__init__()
        s = W // 2 if res > W else 0
        self.blocks = nn.ModuleList(SwinBlock(dim, heads, s if i % 2 else 0) for i in range(depth))
        self.res, self.s = res, s
        self.norm, self.red = nn.LayerNorm(8 * dim), nn.Linear(8 * dim, 2 * dim, bias=False)

    def forward(self, x):
        mask = shift_mask(self.res, self.s) if self.s else None
        for b in self.blocks:
            x = b(x, mask)
        parts = [x[:, i::2, j::2, k::2] for i, j, k in itertools.product((0, 1), repeat=3)]
        return self.red(self.norm(torch.cat(parts, -1)))


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c1, self.n1 = nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout)
        self.c2, self.n2 = nn.Conv3d(cout, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout)
        self.skip = nn.Sequential(nn.Conv3d(cin, cout, 1, bias=False), nn.InstanceNorm3d(cout)) \
            if cin != cout else nn.Identity()

    def forward(self, x):
        h = F.leaky_relu(self.n1(self.c1(x)), 0.01)
        return F.leaky_relu(self.n2(self.c2(h)) + self.skip(x), 0.01)


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.up, self.res = nn.ConvTranspose3d(cin, cout, 2, 2, bias=False), ResBlock(2 * cout, cout)

    def forward(self, x, skip):
        return self.res(torch.cat([self.up(x), skip], 1))


class SwinUNETR(nn.Module):
    def __init__(self, size=96):
        super().__init__()
        self.embed = nn.Conv3d(1, FS, 2, 2)
        r = size // 2
        self.stages = nn.ModuleList(Stage(FS * 2 ** i, DEPTHS[i], HEADS[i], r // 2 ** i) for i in range(4))
        self.enc = nn.ModuleList([ResBlock(1, FS)] + [ResBlock(FS * 2 ** i, FS * 2 ** i) for i in range(5)])
        self.dec = nn.ModuleList([Up(FS * 16, FS * 8), Up(FS * 8, FS * 4), Up(FS * 4, FS * 2), Up(FS * 2, FS),
                                  Up(FS, FS)])
        self.out = nn.Conv3d(FS, NC, 1)
        self.ckpt = False

    def forward(self, x):
        h = self.embed(x).permute(0, 2, 3, 4, 1)
        hs = [h]
        for st in self.stages:
            h = checkpoint(st, h, use_reentrant=False) if self.ckpt else st(h)
            hs.append(h)
        feats = [self.enc[0](x)] + [self.enc[i + 1](F.layer_norm(z, z.shape[-1:]).permute(0, 4, 1, 2, 3))
                                    for i, z in enumerate(hs)]
        d = feats[5]
        for i, up in enumerate(self.dec):
            d = up(d, feats[4 - i])
        return self.out(d)


def loss_fn(logits, y):
    logits = logits.float()
    ce = F.cross_entropy(logits, y)
    p = logits.softmax(1)
    oh = F.one_hot(y, NC).permute(0, 4, 1, 2, 3).float()
    dims = (0, 2, 3, 4)
    dice = (2 * (p * oh).sum(dims) + 1e-5) / (p.sum(dims) + oh.sum(dims) + 1e-5)
    return ce + (1 - dice).mean()


def batch(b):
    return torch.randn(b, 1, 96, 96, 96, device=device), torch.randint(0, NC, (b, 96, 96, 96), device=device)


model = SwinUNETR().to(device)
print("params", sum(p.numel() for p in model.parameters()))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-5)
for step in range(3):
    x, y = batch(2)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
del loss, x, y
print("bf16 train max allocated", torch.cuda.max_memory_allocated())
report("bf16 train 96^3 batch 2")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    x, _ = batch(4)
    seg = model(x).argmax(1).to(torch.uint8)
print("eval seg", tuple(seg.shape), "max alloc", torch.cuda.max_memory_allocated())
del x, seg, _
report("no_grad fp16 eval batch 4")

torch.cuda.empty_cache()
model.train()
model.ckpt = True
scaler = torch.amp.GradScaler("cuda")
for step in range(3):
    x, y = batch(4)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"fp16 ckpt step {step} loss {loss.item():.4f}")
del loss
report("fp16 checkpointed stages batch 4")
