"""BEVFormer-lite (Li et al. 2022) written by hand: six cameras, 50 x 50 BEV queries, 3 encoder layers.

Image backbone: timm resnet50 (from config, no weights) with features_only at strides 8 and 16, run through
torch.utils.checkpoint (non-reentrant) as a whole in training (timm's own set_grad_checkpointing on a
features_only resnet fails in backward: its in-place act1 is checkpointed alone); 1x1 convolutions to d=256
per level. Each encoder layer has: temporal self-attention, deformable attention written with F.grid_sample
over the history BEV and the current queries (8 heads, 4 sampling points, offsets and softmaxed weights from
the queries, as MSDeformableAttention's pytorch fallback does); spatial cross-attention, deformable attention
from each query's 4 pillar heights projected into all six cameras (a fixed random projection drawn once on the
CPU: normalised image coordinates and a visibility mask), 8 heads x 2 points per height on both feature
levels, masked and averaged over the cameras that see the point; FFN; post-norm LayerNorms. Detection head:
ConvTranspose2d to 100 x 100 and a CenterPoint-style heatmap (10 classes) + 8 box regression,
torchvision.ops.sigmoid_focal_loss and an L1 on 300 gathered cells. The history BEV comes from the previous
frame computed under torch.no_grad() in eval mode (BEVFormer's obtain_history_bev), then the model is put back
in train mode.

Phases: 3 steps under bf16 autocast with AdamW (backbone lr x 0.1) and clip 35 at batch 2 (12 images of 480 x
800, plus the history frame's 12); a no_grad evaluation over a 3-frame video at batch 2 in fp32 chaining the
BEV from frame to frame; 2 steps under fp16 autocast with GradScaler, backbone in channels_last and grad
checkpointing off; torch.cuda.empty_cache() and the reserved memory printed. 3 phases."""

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torchvision.ops import sigmoid_focal_loss

torch.manual_seed(2315)
device = "cuda"
NCAM, IMH, IMW = 6, 480, 800
D, HEADS, BH, BW, ZS = 256, 8, 50, 50, 4
NQ = BH * BW
NCLS, KBOX = 10, 300


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class TemporalSelfAttention(nn.Module):
    """Deformable attention over [history BEV, current queries] (2 'levels'), 4 points per head."""

    def __init__(self, npts=4):
        super().__init__()
        self.npts = npts
        self.value = nn.Linear(D, D)
        self.offsets = nn.Linear(2 * D, HEADS * 2 * npts * 2)
        self.weights = nn.Linear(2 * D, HEADS * 2 * npts)
        self.out = nn.Linear(D, D)

    def forward(self, q, prev, ref):  # q [B, NQ, D], prev [B, NQ, D], ref [B*HEADS, NQ, 1, 2] in [-1, 1]
        bsz = q.shape[0]
        qq = torch.cat([prev, q], dim=-1)
        off = self.offsets(qq).view(bsz, NQ, HEADS, 2, self.npts, 2).permute(0, 2, 3, 1, 4, 5)
        w = self.weights(qq).view(bsz, NQ, HEADS, 2 * self.npts).softmax(-1).view(bsz, NQ, HEADS, 2, self.npts)
        w = w.permute(0, 2, 3, 1, 4)  # [B, H, 2, NQ, P]
        out = 0
        for lvl, src in enumerate((prev, q)):
            v = self.value(src).view(bsz, BH, BW, HEADS, D // HEADS).permute(0, 3, 4, 1, 2)
            v = v.reshape(bsz * HEADS, D // HEADS, BH, BW)
            grid = ref + off[:, :, lvl].reshape(bsz * HEADS, NQ, self.npts, 2) / BW
            s = F.grid_sample(v, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
            s = s.view(bsz, HEADS, D // HEADS, NQ, self.npts)
            out = out + (s * w[:, :, lvl].unsqueeze(2)).sum(-1)
        out = out.permute(0, 3, 1, 2).reshape(bsz, NQ, D)
        return self.out(out)


class SpatialCrossAttention(nn.Module):
    def __init__(self, nlvl=2, npts=2):
        super().__init__()
        self.nlvl, self.npts = nlvl, npts
        self.value = nn.Linear(D, D)
        self.offsets = nn.Linear(D, HEADS * nlvl * ZS * npts * 2)
        self.weights = nn.Linear(D, HEADS * nlvl * ZS * npts)
        self.out = nn.Linear(D, D)

    def forward(self, q, feats, cam_ref, cam_mask):
        # q [B, NQ, D]; feats: list of [B*NCAM, D, h, w]; cam_ref [NCAM, NQ, ZS, 2]; cam_mask [NCAM, NQ]
        bsz = q.shape[0]
        off = self.offsets(q).view(bsz, NQ, HEADS, self.nlvl, ZS, self.npts, 2)
        w = self.weights(q).view(bsz, NQ, HEADS, self.nlvl * ZS * self.npts).softmax(-1)
        w = w.view(bsz, NQ, HEADS, self.nlvl, ZS * self.npts).permute(0, 2, 3, 1, 4)  # [B, H, L, NQ, ZP]
        out = 0
        for lvl, f in enumerate(feats):
            h, wd = f.shape[-2:]
            v = self.value(f.flatten(2).transpose(1, 2))  # [B*NCAM, hw, D]
            v = v.view(bsz * NCAM, h, wd, HEADS, D // HEADS).permute(0, 3, 4, 1, 2).reshape(-1, D // HEADS, h, wd)
            o = off[:, :, :, lvl].permute(0, 2, 1, 3, 4, 5).unsqueeze(1)  # [B, 1, H, NQ, ZS, P, 2]
            scale = torch.tensor([wd, h], device=q.device, dtype=o.dtype)
            grid = cam_ref.view(1, NCAM, 1, NQ, ZS, 1, 2) + o / scale
            grid = grid.reshape(bsz * NCAM * HEADS, NQ, ZS * self.npts, 2)
            s = F.grid_sample(v, grid.to(v.dtype), mode="bilinear", padding_mode="zeros", align_corners=False)
            s = s.view(bsz, NCAM, HEADS, D // HEADS, NQ, ZS * self.npts)
            s = (s * w[:, None, :, lvl].unsqueeze(3)).sum(-1)  # [B, NCAM, H, Dh, NQ]
            out = out + (s * cam_mask.view(1, NCAM, 1, 1, NQ)).sum(1)
        count = cam_mask.sum(0).clamp(min=1).view(1, 1, 1, NQ)
        out = (out / count).permute(0, 3, 1, 2).reshape(bsz, NQ, D)
        return self.out(out)


class EncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tsa = TemporalSelfAttention()
        self.sca = SpatialCrossAttention()
        self.ffn = nn.Sequential(nn.Linear(D, 512), nn.ReLU(inplace=True), nn.Dropout(0.1), nn.Linear(512, D))
        self.n1, self.n2, self.n3 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, q, prev, ref, feats, cam_ref, cam_mask):
        q = self.n1(q + self.tsa(q, prev, ref))
        q = self.n2(q + self.sca(q, feats, cam_ref, cam_mask))
        return self.n3(q + self.ffn(q))


class BEVFormerLite(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model("resnet50", pretrained=False, features_only=True, out_indices=(2, 3))
        self.ckpt = True
        self.necks = nn.ModuleList([nn.Conv2d(c, D, 1) for c in self.backbone.feature_info.channels()])
        self.bev_queries = nn.Embedding(NQ, D)
        self.bev_pos = nn.Embedding(NQ, D)
        self.layers = nn.ModuleList([EncoderLayer() for _ in range(3)])
        self.up = nn.Sequential(nn.ConvTranspose2d(D, 128, 2, 2), nn.BatchNorm2d(128), nn.ReLU(inplace=True))
        self.hm = nn.Sequential(nn.Conv2d(128, 64, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(64, NCLS, 1))
        self.reg = nn.Sequential(nn.Conv2d(128, 64, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(64, 8, 1))
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, BH), torch.linspace(-1, 1, BW), indexing="ij")
        self.register_buffer("ref", torch.stack([xs, ys], -1).view(1, NQ, 1, 2))

    def encode(self, imgs, prev_bev, cam_ref, cam_mask):
        bsz = imgs.shape[0]
        if self.ckpt and torch.is_grad_enabled():
            feats = checkpoint(self.backbone, imgs.flatten(0, 1), use_reentrant=False)
        else:
            feats = self.backbone(imgs.flatten(0, 1))
        feats = [neck(f) for neck, f in zip(self.necks, feats)]
        q = (self.bev_queries.weight + self.bev_pos.weight).unsqueeze(0).expand(bsz, -1, -1)
        if prev_bev is None:
            prev_bev = q
        ref = self.ref.expand(bsz * HEADS, -1, -1, -1)
        for layer in self.layers:
            q = layer(q, prev_bev, ref, feats, cam_ref, cam_mask)
        return q

    def head(self, bev):
        x = self.up(bev.transpose(1, 2).reshape(bev.shape[0], D, BH, BW))
        return self.hm(x), self.reg(x)


def camera_geometry():
    g = torch.Generator().manual_seed(99)
    cam_ref = torch.rand(NCAM, NQ, ZS, 2, generator=g) * 2.4 - 1.2
    cam_mask = ((cam_ref.abs() <= 1).all(-1).any(-1)).float()
    return cam_ref.to(device), cam_mask.to(device)


def det_loss(hm, reg, target_hm, ind, box):
    l_hm = sigmoid_focal_loss(hm.float(), target_hm, alpha=0.25, gamma=2.0, reduction="sum") / KBOX
    r = reg.flatten(2).float().gather(2, ind.unsqueeze(1).expand(-1, 8, -1)).transpose(1, 2)
    return l_hm + 0.25 * F.l1_loss(r, box)


def targets(bsz):
    hm = (torch.rand(bsz, NCLS, 2 * BH, 2 * BW, device=device) > 0.995).float()
    ind = torch.randint(0, 4 * NQ, (bsz, KBOX), device=device)
    return hm, ind, torch.randn(bsz, KBOX, 8, device=device)


model = BEVFormerLite().to(device)
cam_ref, cam_mask = camera_geometry()
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

bb = [p for n, p in model.named_parameters() if n.startswith("backbone.")]
rest = [p for n, p in model.named_parameters() if not n.startswith("backbone.")]
opt = torch.optim.AdamW([{"params": bb, "lr": 2e-5}, {"params": rest}], lr=2e-4, weight_decay=0.01)
B = 2
for step in range(3):
    prev_imgs = torch.randn(B, NCAM, 3, IMH, IMW, device=device)
    imgs = torch.randn(B, NCAM, 3, IMH, IMW, device=device)
    hm_t, ind, box = targets(B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model.eval()
        with torch.no_grad():
            prev_bev = model.encode(prev_imgs, None, cam_ref, cam_mask)
        model.train()
        bev = model.encode(imgs, prev_bev, cam_ref, cam_mask)
        hm, reg = model.head(bev)
        loss = det_loss(hm, reg, hm_t, ind, box)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 35.0)
    opt.step()
    print(f"bf16 step {step} loss {loss.item():.4f}")
del prev_imgs, imgs, hm_t, ind, box, prev_bev, bev, hm, reg, loss
report("train bf16 checkpointed backbone")

model.eval()
with torch.no_grad():
    bev = None
    for frame in range(3):
        imgs = torch.randn(B, NCAM, 3, IMH, IMW, device=device)
        bev = model.encode(imgs, bev, cam_ref, cam_mask)
        hm, reg = model.head(bev)
        scores, idx = hm.sigmoid().flatten(1).topk(300)
        print(f"frame {frame} top score mean {scores.mean().item():.4f}")
del imgs, bev, hm, reg, scores, idx
report("eval no_grad 3-frame video")

model.train()
model.ckpt = False
model.backbone.to(memory_format=torch.channels_last)
scaler = torch.amp.GradScaler("cuda")
for step in range(2):
    prev_imgs = torch.randn(B, NCAM, 3, IMH, IMW, device=device).flatten(0, 1)
    prev_imgs = prev_imgs.contiguous(memory_format=torch.channels_last).view(B, NCAM, 3, IMH, IMW)
    imgs = torch.randn(B, NCAM, 3, IMH, IMW, device=device)
    hm_t, ind, box = targets(B)
    with torch.autocast("cuda", dtype=torch.float16):
        model.eval()
        with torch.no_grad():
            prev_bev = model.encode(prev_imgs, None, cam_ref, cam_mask)
        model.train()
        bev = model.encode(imgs, prev_bev, cam_ref, cam_mask)
        hm, reg = model.head(bev)
        loss = det_loss(hm, reg, hm_t, ind, box)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 35.0)
    scaler.step(opt)
    scaler.update()
    print(f"fp16 step {step} loss {loss.item():.4f}")
report("train fp16 gradscaler channels_last")
torch.cuda.empty_cache()
print("after empty_cache reserved", torch.cuda.memory_reserved())
