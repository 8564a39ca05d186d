"""VideoMAE-like self-supervised pre-training on 16-frame clips, written by hand (no timm, no transformers).

Clips of 16 frames at 224 x 224 (B, 3, 16, 224, 224), fp32 on the device, normalised per channel. Tubelet
patch embedding: nn.Conv3d(3, 384, kernel (2, 16, 16), stride (2, 16, 16)) -> 8 x 14 x 14 = 1,568 tokens
plus fixed sinusoidal position embeddings. Tube masking at 90 %: one random mask over the 196 spatial
positions per clip repeated over the 8 temporal slots, realised with torch.rand + argsort and the visible
tokens taken with torch.gather (19 spatial positions x 8 = 152 visible tokens per clip). Encoder:
a ViT-S (12 blocks, width 384, 6 heads, MLP 1,536, pre-LN, F.scaled_dot_product_attention) over the visible
tokens only; decoder: Linear 384 -> 192, learned mask token for the 1,416 masked slots, un-shuffled with
gather by the inverse permutation, 4 blocks of width 192 (3 heads), and a Linear head predicting the
2 x 16 x 16 x 3 = 1,536 normalised pixel values of each masked tubelet (per-patch normalised targets,
MSE on masked tokens only).

Training: batch 24, bf16 autocast, AdamW(fused=True, lr 1.5e-4 scaled, betas (0.9, 0.95), wd 0.05 on
weights only), cosine schedule with linear warmup through LambdaLR.

Then a fine-tuning variant: the encoder over all 1,568 tokens (no masking), mean pooling, LayerNorm and a
400-class Linear head, label-smoothed cross entropy, batch 8, bf16 autocast, a fresh AdamW (foreach)
with layer-wise lr decay groups.

Phases: model + data set-up; the first pre-training step; 3 more steps; no_grad reconstruction loss on
a held-out batch of 32; 2 fine-tuning steps. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19901)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    B, T, H, W, STEPS, EVAL_B, FT_B = 2, 4, 64, 64, 1, 2, 2
else:
    B, T, H, W, STEPS, EVAL_B, FT_B = 24, 16, 224, 224, 3, 32, 8
TUBE, PATCH = 2, 16
ENC_D, ENC_DEPTH, ENC_HEADS = 384, 12, 6
DEC_D, DEC_DEPTH, DEC_HEADS = 192, 4, 3
MASK_RATIO = 0.9
N_CLASSES = 400
GT, GH, GW = T // TUBE, H // PATCH, W // PATCH
N_SPATIAL = GH * GW
N_TOK = GT * N_SPATIAL
N_VIS_SPATIAL = int(N_SPATIAL * (1 - MASK_RATIO))
PATCH_DIM = TUBE * PATCH * PATCH * 3


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB, "
            f"reserved {torch.cuda.memory_reserved() / 2**20:.1f} MiB"
        )
        torch.cuda.reset_peak_memory_stats()


def sinusoid_table(n, d):
    pos = torch.arange(n, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    tab = torch.zeros(n, d)
    tab[:, 0::2] = torch.sin(pos * div)
    tab[:, 1::2] = torch.cos(pos * div)
    return tab.unsqueeze(0)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, dim * 4)
        self.fc2 = nn.Linear(dim * 4, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TubeletEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Conv3d(3, ENC_D, kernel_size=(TUBE, PATCH, PATCH), stride=(TUBE, PATCH, PATCH))

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N_TOK, D), token order t, h, w


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = TubeletEmbed()
        self.register_buffer("pos", sinusoid_table(N_TOK, ENC_D), persistent=False)
        self.blocks = nn.ModuleList([Block(ENC_D, ENC_HEADS) for _ in range(ENC_DEPTH)])
        self.norm = nn.LayerNorm(ENC_D, eps=1e-6)

    def forward(self, video, vis_idx=None):
        x = self.patch(video) + self.pos
        if vis_idx is not None:
            x = torch.gather(x, 1, vis_idx.unsqueeze(-1).expand(-1, -1, ENC_D))
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(ENC_D, DEC_D)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, DEC_D))
        self.register_buffer("pos", sinusoid_table(N_TOK, DEC_D), persistent=False)
        self.blocks = nn.ModuleList([Block(DEC_D, DEC_HEADS) for _ in range(DEC_DEPTH)])
        self.norm = nn.LayerNorm(DEC_D, eps=1e-6)
        self.head = nn.Linear(DEC_D, PATCH_DIM)
        nn.init.trunc_normal_(self.mask_token, std=0.02)

    def forward(self, x, ids_restore, n_masked):
        x = self.embed(x)
        b = x.shape[0]
        x = torch.cat([x, self.mask_token.expand(b, n_masked, -1)], dim=1)
        x = torch.gather(x, 1, ids_restore.unsqueeze(-1).expand(-1, -1, DEC_D)) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def tube_mask(b):
    noise = torch.rand(b, N_SPATIAL, device=device)
    ids_shuffle = torch.argsort(noise, dim=1)
    offs = (torch.arange(GT, device=device) * N_SPATIAL).view(1, GT, 1)
    vis = (ids_shuffle[:, :N_VIS_SPATIAL].unsqueeze(1) + offs).reshape(b, -1)
    masked = (ids_shuffle[:, N_VIS_SPATIAL:].unsqueeze(1) + offs).reshape(b, -1)
    ids_keep_then_masked = torch.cat([vis, masked], dim=1)
    ids_restore = torch.argsort(ids_keep_then_masked, dim=1)
    mask = torch.ones(b, N_TOK, device=device)
    mask.scatter_(1, vis, 0.0)
    return vis, ids_restore, mask


def patchify_targets(video):
    b = video.shape[0]
    x = video.reshape(b, 3, GT, TUBE, GH, PATCH, GW, PATCH)
    x = x.permute(0, 2, 4, 6, 3, 5, 7, 1).reshape(b, N_TOK, PATCH_DIM)
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, unbiased=True, keepdim=True)
    return (x - mean) / (var.sqrt() + 1e-6)


MEAN = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1, 1)


def make_clips(b):
    raw = torch.rand(b, 3, T, H, W, device=device)
    return (raw - MEAN) / STD


encoder = Encoder().to(device)
decoder = Decoder().to(device)
params = list(encoder.parameters()) + list(decoder.parameters())
decay = [p for p in params if p.ndim >= 2]
no_decay = [p for p in params if p.ndim < 2]
lr = 1.5e-4 * B / 256
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
    lr=lr,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
WARMUP, TOTAL = 2, 40
sched = torch.optim.lr_scheduler.LambdaLR(
    opt,
    lambda s: (
        (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))
    ),
)
n_params = sum(p.numel() for p in params)
print(f"encoder+decoder parameters: {n_params / 1e6:.2f} M, tokens {N_TOK}, visible {N_VIS_SPATIAL * GT}")
report("setup")


def pretrain_step():
    encoder.train()
    decoder.train()
    video = make_clips(B)
    vis, ids_restore, mask = tube_mask(B)
    with torch.no_grad():
        target = patchify_targets(video)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        latent = encoder(video, vis)
        pred = decoder(latent, ids_restore, N_TOK - vis.shape[1])
    loss = ((pred.float() - target) ** 2).mean(dim=-1)
    loss = (loss * mask).sum() / mask.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item()


print(f"pretrain step 0 loss {pretrain_step():.4f}")
report("first pretrain step")
for _ in range(STEPS):
    loss = pretrain_step()
print(f"pretrain step {STEPS} loss {loss:.4f} lr {sched.get_last_lr()[0]:.2e}")
report("pretrain")

encoder.eval()
decoder.eval()
with torch.no_grad():
    video = make_clips(EVAL_B)
    vis, ids_restore, mask = tube_mask(EVAL_B)
    target = patchify_targets(video)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = decoder(encoder(video, vis), ids_restore, N_TOK - vis.shape[1])
    val = (((pred.float() - target) ** 2).mean(-1) * mask).sum() / mask.sum()
print(f"held-out reconstruction loss {val.item():.4f}")
del video, vis, ids_restore, mask, target, pred
report("eval")


class Classifier(nn.Module):
    def __init__(self, enc):
        super().__init__()
        self.encoder = enc
        self.fc_norm = nn.LayerNorm(ENC_D)
        self.head = nn.Linear(ENC_D, N_CLASSES)

    def forward(self, video):
        x = self.encoder(video)
        return self.head(self.fc_norm(x.mean(dim=1)))


clf = Classifier(encoder).to(device)
opt = sched = decoder = None
groups = []
layer_decay = 0.75
for i, blk in enumerate(clf.encoder.blocks):
    groups.append({"params": list(blk.parameters()), "lr": 5e-4 * layer_decay ** (ENC_DEPTH - i)})
groups.append({"params": list(clf.encoder.patch.parameters()), "lr": 5e-4 * layer_decay ** (ENC_DEPTH + 1)})
groups.append(
    {
        "params": list(clf.encoder.norm.parameters())
        + list(clf.fc_norm.parameters())
        + list(clf.head.parameters()),
        "lr": 5e-4,
    }
)
ft_opt = torch.optim.AdamW(groups, weight_decay=0.05, foreach=True)
clf.train()
for step in range(2):
    video = make_clips(FT_B)
    labels = torch.randint(0, N_CLASSES, (FT_B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = clf(video)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)
    ft_opt.zero_grad(set_to_none=True)
    loss.backward()
    ft_opt.step()
    print(f"finetune step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"finetune peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
