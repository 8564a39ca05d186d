"""UNETR (Hatamizadeh et al. 2022) written by hand for BraTS-style 3-D brain tumour segmentation: a ViT-B
encoder over a 4-channel 96^3 volume (Conv3d patch embedding with 16^3 patches -> 216 tokens of 768, a
learned position embedding, 12 pre-norm blocks of 12 heads with F.scaled_dot_product_attention, MLP 3072 GELU),
the hidden states of blocks 3, 6, 9 and 12 reshaped to 6^3 grids and brought up by stacks of ConvTranspose3d
+ residual Conv3d-InstanceNorm3d-LeakyReLU blocks (feature size 16) into a U-shaped decoder with a residual
convolutional stem on the input. Three overlapping sigmoid regions (whole tumour, tumour core, enhancing):
BCE-with-logits + soft Dice per region.

Phases: 4 steps under bf16 autocast at batch 4 on 96^3 with fused AdamW (lr 1e-4, weight decay 1e-5) and
gradient clipping to 1.0; flip test-time augmentation under inference_mode with bf16 autocast (identity and
the three single-axis flips) at batch 2 on 128^3 with the position embedding interpolated trilinearly to
8^3 = 512 tokens, sigmoid probabilities un-flipped and averaged; then every transformer block run through
torch.utils.checkpoint (non-reentrant) and 3 steps under fp16 autocast with GradScaler at batch 4 on 128^3
(interpolated position embedding) with the same AdamW. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2274)
device = "cuda"
D, HEADS, DEPTH, P, FS = 768, 12, 12, 16, 16


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        B, N, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, N, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, D)
        x = x + self.proj(a)
        return x + self.mlp(self.n2(x))


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.c1, self.n1 = nn.Conv3d(cin, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout, affine=True)
        self.c2, self.n2 = nn.Conv3d(cout, cout, 3, padding=1, bias=False), nn.InstanceNorm3d(cout, affine=True)
        self.skip = nn.Sequential(nn.Conv3d(cin, cout, 1, bias=False), nn.InstanceNorm3d(cout, affine=True)) \
            if cin != cout else nn.Identity()

    def forward(self, x):
        h = F.leaky_relu(self.n1(self.c1(x)), 0.01)
        h = self.n2(self.c2(h))
        return F.leaky_relu(h + self.skip(x), 0.01)


class UpBlock(nn.Module):
    """ConvTranspose3d x2 then a residual block on cat(up, skip)."""

    def __init__(self, cin, cout):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, 2, 2, bias=False)
        self.res = ResBlock(2 * cout, cout)

    def forward(self, x, skip):
        return self.res(torch.cat([self.up(x), skip], 1))


class PrUp(nn.Module):
    """A hidden state brought up by n ConvTranspose3d (+ conv block) steps."""

    def __init__(self, cout, n):
        super().__init__()
        self.first = nn.ConvTranspose3d(D, cout, 2, 2, bias=False)
        self.rest = nn.ModuleList(nn.Sequential(nn.ConvTranspose3d(cout, cout, 2, 2, bias=False), ResBlock(cout, cout))
                                  for _ in range(n - 1))

    def forward(self, x):
        x = self.first(x)
        for m in self.rest:
            x = m(x)
        return x


class UNETR(nn.Module):
    def __init__(self, cin=4, nc=3, grid=6):
        super().__init__()
        self.patch = nn.Conv3d(cin, D, P, P)
        self.pos = nn.Parameter(torch.randn(1, grid ** 3, D) * 0.02)
        self.grid = grid
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(D)
        self.enc1 = ResBlock(cin, FS)
        self.enc2, self.enc3, self.enc4 = PrUp(2 * FS, 3), PrUp(4 * FS, 2), PrUp(8 * FS, 1)
        self.dec5, self.dec4 = UpBlock(D, 8 * FS), UpBlock(8 * FS, 4 * FS)
        self.dec3, self.dec2 = UpBlock(4 * FS, 2 * FS), UpBlock(2 * FS, FS)
        self.out = nn.Conv3d(FS, nc, 1)
        self.ckpt = False

    def pos_embed(self, g):
        if g == self.grid:
            return self.pos
        p = self.pos.transpose(1, 2).reshape(1, D, self.grid, self.grid, self.grid)
        p = F.interpolate(p, size=(g, g, g), mode="trilinear", align_corners=False)
        return p.flatten(2).transpose(1, 2)

    def forward(self, x):
        B = x.shape[0]
        t = self.patch(x)
        g = t.shape[-1]
        h = t.flatten(2).transpose(1, 2) + self.pos_embed(g)
        hs = []
        for i, blk in enumerate(self.blocks):
            h = checkpoint(blk, h, use_reentrant=False) if self.ckpt else blk(h)
            if i in (2, 5, 8):
                hs.append(h)
        hs.append(self.norm(h))
        grids = [z.transpose(1, 2).reshape(B, D, g, g, g) for z in hs]
        e1 = self.enc1(x)
        e2, e3, e4 = self.enc2(grids[0]), self.enc3(grids[1]), self.enc4(grids[2])
        d = self.dec5(grids[3], e4)
        d = self.dec4(d, e3)
        d = self.dec3(d, e2)
        d = self.dec2(d, e1)
        return self.out(d)


def loss_fn(logits, y):
    logits = logits.float()
    bce = F.binary_cross_entropy_with_logits(logits, y)
    p = logits.sigmoid()
    dims = (0, 2, 3, 4)
    dice = (2 * (p * y).sum(dims) + 1e-5) / (p.sum(dims) + y.sum(dims) + 1e-5)
    return bce + (1 - dice).mean()


def batch(b, s):
    x = torch.randn(b, 4, s, s, s, device=device)
    lab = torch.randint(0, 4, (b, s, s, s), device=device)
    y = torch.stack([lab > 0, (lab == 1) | (lab == 3), lab == 3], 1).float()  # WT, TC, ET
    return x, y


model = UNETR().to(device)
print("params", sum(p.numel() for p in model.parameters()))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-5, fused=True)
for step in range(4):
    x, y = batch(4, 96)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
del loss, x, y
print("bf16 train max allocated", torch.cuda.max_memory_allocated())
report("bf16 train 96^3")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randn(2, 4, 128, 128, 128, device=device)
    prob = torch.zeros(2, 3, 128, 128, 128, device=device)
    for dims in ((), (2,), (3,), (4,)):
        xi = x.flip(dims) if dims else x
        p = model(xi).float().sigmoid()
        prob += p.flip(dims) if dims else p
    prob /= 4
    seg = prob > 0.5
print("tta regions", tuple(seg.shape), "max alloc", torch.cuda.max_memory_allocated())
del x, prob, seg, p, xi
report("inference_mode flip tta 128^3")

model.train()
model.ckpt = True
scaler = torch.amp.GradScaler("cuda")
for step in range(3):
    x, y = batch(4, 128)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    print(f"fp16 ckpt step {step} loss {loss.item():.4f}")
del loss
report("fp16 checkpointed blocks 128^3")
