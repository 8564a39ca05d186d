"""TimeSformer-like video classifier (divided space-time attention), after facebookresearch/TimeSformer.

Clips of 8 frames at 224 x 224; each frame cut into 16 x 16 patches by a Conv2d patch embedding applied to
the (B*T, 3, 224, 224) frames -> 196 patches per frame, a [CLS] token, learned spatial position and temporal
embeddings. 12 blocks of width 512 (8 heads, MLP 2,048), each with divided attention:
  temporal: the patch tokens regrouped to (B*196, 8, 512), LayerNorm, qkv Linear, SDPA over the 8 frames,
            proj, then the extra temporal_fc Linear and a residual;
  spatial:  the [CLS] token repeated for every frame and prepended to that frame's 196 tokens,
            (B*8, 197, 512), SDPA, the 8 [CLS] outputs averaged back into one;
  MLP with GELU. Final LayerNorm on [CLS] and a 174-class head (Something-Something-v2 sized).

Training: batch 8, fp16 autocast with torch.amp.GradScaler (init_scale 2 ** 14), AdamW(foreach=True, lr
1e-4, wd 0.05), unscale_ + clip_grad_norm_(1.0), a cosine lr via CosineAnnealingLR. Then the same model
trained with torch.utils.checkpoint(use_reentrant=False) around every block at batch 16. Then evaluation
under torch.inference_mode: 4 clips x 3 temporal views (12 clips in one batch), softmax scores averaged
over the views.

Phases: set-up; first step (batch 8); 2 more steps; 2 checkpointed steps at batch 16; inference_mode
evaluation. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19902)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    T, IMG, B, B_CKPT, STEPS, N_VID = 4, 64, 2, 2, 1, 1
else:
    T, IMG, B, B_CKPT, STEPS, N_VID = 8, 224, 8, 16, 2, 4
PATCH, DIM, DEPTH, HEADS, N_CLASSES, VIEWS = 16, 512, 12, 8, 174, 3
NP = (IMG // PATCH) ** 2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class MHSA(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, DIM * 3)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


class DividedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.temporal_norm1 = nn.LayerNorm(DIM)
        self.temporal_attn = MHSA()
        self.temporal_fc = nn.Linear(DIM, DIM)
        self.norm1 = nn.LayerNorm(DIM)
        self.attn = MHSA()
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, DIM * 4), nn.GELU(), nn.Linear(DIM * 4, DIM))

    def forward(self, x):
        b = x.shape[0]
        cls, tok = x[:, :1], x[:, 1:]  # tok: (B, NP*T, D) ordered (patch, frame)
        # temporal attention over the frames of each patch position
        xt = tok.reshape(b * NP, T, DIM)
        res_t = self.temporal_fc(self.temporal_attn(self.temporal_norm1(xt)))
        tok = tok + res_t.reshape(b, NP * T, DIM)
        # spatial attention within each frame, CLS repeated per frame
        xs = tok.reshape(b, NP, T, DIM).permute(0, 2, 1, 3).reshape(b * T, NP, DIM)
        cls_rep = cls.expand(b, T, DIM).reshape(b * T, 1, DIM)
        xs = torch.cat([cls_rep, xs], dim=1)
        res_s = self.attn(self.norm1(xs))
        cls_out = res_s[:, :1].reshape(b, T, DIM).mean(dim=1, keepdim=True)
        res_tok = res_s[:, 1:].reshape(b, T, NP, DIM).permute(0, 2, 1, 3).reshape(b, NP * T, DIM)
        x = torch.cat([cls + cls_out, tok + res_tok], dim=1)
        return x + self.mlp(self.norm2(x))


class TimeSformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        self.pos_embed = nn.Parameter(torch.randn(1, NP + 1, DIM) * 0.02)
        self.time_embed = nn.Parameter(torch.zeros(1, T, DIM))
        self.blocks = nn.ModuleList([DividedBlock() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, N_CLASSES)
        self.use_checkpoint = False

    def forward(self, video):  # (B, 3, T, H, W)
        b = video.shape[0]
        frames = video.transpose(1, 2).reshape(b * T, 3, IMG, IMG)
        x = self.patch_embed(frames).flatten(2).transpose(1, 2)  # (B*T, NP, D)
        x = torch.cat([self.cls_token.expand(b * T, -1, -1), x], dim=1) + self.pos_embed
        cls = x[:b, :1]
        x = x[:, 1:].reshape(b, T, NP, DIM).transpose(1, 2) + self.time_embed.unsqueeze(1)
        x = torch.cat([cls, x.reshape(b, NP * T, DIM)], dim=1)
        for blk in self.blocks:
            if self.use_checkpoint and self.training:
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return self.head(self.norm(x)[:, 0])


model = TimeSformer().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, foreach=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14, enabled=amp)
print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M")
report("setup")


def train_step(bs):
    model.train()
    video = torch.randn(bs, 3, T, IMG, IMG, device=device)
    labels = torch.randint(0, N_CLASSES, (bs,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = F.cross_entropy(model(video), labels)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    return loss.item()


print(f"step 0 loss {train_step(B):.4f} scale {scaler.get_scale()}")
report("first step")
for _ in range(STEPS):
    loss = train_step(B)
print(f"step {STEPS} loss {loss:.4f}")
report("train")

model.use_checkpoint = True
for _ in range(2):
    loss = train_step(B_CKPT)
print(f"checkpointed batch {B_CKPT} loss {loss:.4f}")
report("checkpointed train")

model.eval()
with torch.inference_mode():
    views = torch.randn(N_VID * VIEWS, 3, T, IMG, IMG, device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = model(views)
    scores = logits.float().softmax(-1).view(N_VID, VIEWS, N_CLASSES).mean(1)
    top5 = scores.topk(5, dim=-1).indices.cpu()
print(f"top-5 of video 0: {top5[0].tolist()}")
if device == "cuda":
    print(f"eval max allocated {torch.cuda.max_memory_allocated()}")
