"""I-JEPA pretraining written the facebookresearch/ijepa way (src/train.py, src/masks/multiblock.py,
src/masks/utils.py, src/models/vision_transformer.py), by hand: a ViT-Small/16 context encoder
(12 x 384, 6 heads, attention as `(q @ k.transpose(-2, -1)) * scale` then softmax, no SDPA) at
224 x 224, an EMA target encoder (a deepcopy, requires_grad False) and a narrow predictor (6 x 192,
mask tokens, its own sin-cos positions). The multi-block mask collator runs on the CPU with a seeded
generator: per image 4 target blocks (scale 0.15-0.2, aspect 0.75-1.5) and 1 context block (scale
0.85-1.0) with the target patches removed, each list truncated to the batch's minimum length as
ijepa's collator does (sizes from seeded CPU draws, identical on every machine). `apply_masks` is
ijepa's: `torch.gather(x, 1, m.unsqueeze(-1).repeat(1, 1, D))` per mask, concatenated along the
batch; targets are the target encoder's output, `F.layer_norm`ed over features, gathered by the
target masks and `repeat_interleave_batch`ed; loss smooth-L1. bf16 autocast, AdamW with weight-decay
groups, the EMA update with `torch._foreach_mul_` / `torch._foreach_add_(alpha=1 - m)`. Phase 1:
5 steps at batch 96. Phase 2: the target encoder's average-pooled features under inference_mode for
512 images in batches of 256 (bf16 autocast). 2 phases."""

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2682)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


IMG, PATCH = 224, 16
GRID = IMG // PATCH
NP = GRID * GRID


def sincos_2d(dim, grid):
    gh = torch.arange(grid, dtype=torch.float64)
    gy, gx = torch.meshgrid(gh, gh, indexing="ij")

    def one(d, pos):
        omega = 1.0 / 10000 ** (torch.arange(d // 2, dtype=torch.float64) / (d / 2.0))
        out = pos.reshape(-1)[:, None] * omega[None]
        return torch.cat([out.sin(), out.cos()], dim=1)

    return torch.cat([one(dim // 2, gy), one(dim // 2, gx)], dim=1).float()


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def apply_masks(x, masks):
    all_x = []
    for m in masks:
        mask_keep = m.unsqueeze(-1).repeat(1, 1, x.size(-1))
        all_x += [torch.gather(x, dim=1, index=mask_keep)]
    return torch.cat(all_x, dim=0)


def repeat_interleave_batch(x, B, repeat):
    N = len(x) // B
    return torch.cat(
        [torch.cat([x[i * B : (i + 1) * B] for _ in range(repeat)], dim=0) for i in range(N)], dim=0
    )


class VisionTransformer(nn.Module):
    def __init__(self, dim=384, depth=12, heads=6):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, PATCH, PATCH)
        self.register_buffer("pos_embed", sincos_2d(dim, GRID)[None])
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)

    def forward(self, x, masks=None):
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        if masks is not None:
            x = apply_masks(x, masks)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


class Predictor(nn.Module):
    def __init__(self, enc_dim=384, dim=192, depth=6, heads=6):
        super().__init__()
        self.predictor_embed = nn.Linear(enc_dim, dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.register_buffer("pos_embed", sincos_2d(dim, GRID)[None])
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.proj = nn.Linear(dim, enc_dim)

    def forward(self, x, masks_x, masks):
        B = len(x) // len(masks_x)
        x = self.predictor_embed(x)
        x = x + apply_masks(self.pos_embed.repeat(B, 1, 1), masks_x)
        N_ctxt = x.shape[1]
        pos_embs = apply_masks(self.pos_embed.repeat(B, 1, 1), masks)
        pos_embs = repeat_interleave_batch(pos_embs, B, repeat=len(masks_x))
        pred_tokens = self.mask_token.repeat(pos_embs.size(0), pos_embs.size(1), 1) + pos_embs
        x = x.repeat(len(masks), 1, 1)
        x = torch.cat([x, pred_tokens], dim=1)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)[:, N_ctxt:]
        return self.proj(x)


def sample_block(g, scale, aspect):
    s = scale[0] + torch.rand(1, generator=g).item() * (scale[1] - scale[0])
    max_keep = int(NP * s)
    a = math.exp(
        math.log(aspect[0]) + torch.rand(1, generator=g).item() * (math.log(aspect[1]) - math.log(aspect[0]))
    )
    h = min(max(round(math.sqrt(max_keep * a)), 1), GRID - 1)
    w = min(max(round(math.sqrt(max_keep / a)), 1), GRID - 1)
    return h, w


def multiblock_masks(g, batch, npred=4):
    p_size = sample_block(g, (0.15, 0.2), (0.75, 1.5))
    e_size = sample_block(g, (0.85, 1.0), (1.0, 1.0))
    enc, pred = [], []
    for _ in range(batch):
        allowed = torch.ones(GRID, GRID, dtype=torch.int32)
        ms = []
        for _ in range(npred):
            h, w = p_size
            top = torch.randint(0, GRID - h, (1,), generator=g).item()
            left = torch.randint(0, GRID - w, (1,), generator=g).item()
            m = torch.zeros(GRID, GRID, dtype=torch.int32)
            m[top : top + h, left : left + w] = 1
            ms.append(torch.nonzero(m.flatten()).squeeze(-1))
            allowed[top : top + h, left : left + w] = 0
        pred.append(ms)
        h, w = e_size
        top = torch.randint(0, GRID - h, (1,), generator=g).item()
        left = torch.randint(0, GRID - w, (1,), generator=g).item()
        m = torch.zeros(GRID, GRID, dtype=torch.int32)
        m[top : top + h, left : left + w] = 1
        m = m * allowed
        enc.append(torch.nonzero(m.flatten()).squeeze(-1))
    min_keep_pred = min(len(m) for ms in pred for m in ms)
    min_keep_enc = min(len(m) for m in enc)
    masks_pred = [torch.stack([ms[i][:min_keep_pred] for ms in pred]) for i in range(npred)]
    masks_enc = [torch.stack([m[:min_keep_enc] for m in enc])]
    return masks_enc, masks_pred


encoder = VisionTransformer().to(dev)
predictor = Predictor().to(dev)
target_encoder = copy.deepcopy(encoder)
for p in target_encoder.parameters():
    p.requires_grad = False


def groups(*mods):
    decay, no_decay = [], []
    for m in mods:
        for n, p in m.named_parameters():
            (no_decay if p.ndim == 1 or "bias" in n else decay).append(p)
    return [{"params": decay, "weight_decay": 0.04}, {"params": no_decay, "weight_decay": 0.0}]


opt = torch.optim.AdamW(groups(encoder, predictor), lr=1e-3)
report("setup")

g = torch.Generator().manual_seed(2682)
B = 96
for step in range(5):
    imgs = torch.randn(B, 3, IMG, IMG, device=dev)
    masks_enc, masks_pred = multiblock_masks(g, B)
    masks_enc = [m.to(dev, non_blocking=True) for m in masks_enc]
    masks_pred = [m.to(dev, non_blocking=True) for m in masks_pred]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with torch.no_grad():
            h = target_encoder(imgs)
            h = F.layer_norm(h, (h.size(-1),))
            h = apply_masks(h, masks_pred)
            h = repeat_interleave_batch(h, B, repeat=len(masks_enc))
        z = encoder(imgs, masks_enc)
        z = predictor(z, masks_enc, masks_pred)
        loss = F.smooth_l1_loss(z, h)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    m = 0.996 + step * (1.0 - 0.996) / 100
    with torch.no_grad():
        tgt = list(target_encoder.parameters())
        src = list(encoder.parameters())
        torch._foreach_mul_(tgt, m)
        torch._foreach_add_(tgt, src, alpha=1 - m)
    print(f"step {step} loss {loss.item():.4f} ctx {masks_enc[0].shape[1]} pred {masks_pred[0].shape[1]}")
report("train")

del opt, predictor, encoder
feats = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(2):
        imgs = torch.randn(256, 3, IMG, IMG, device=dev)
        feats.append(target_encoder(imgs).mean(dim=1).float())
    feats = torch.cat(feats)
    print("features", tuple(feats.shape), float(feats.norm(dim=1).mean()))
report("features")
print("done")
