"""ActionFormer-like temporal action localisation over pre-extracted frame features, written by hand.

Input: per-video I3D-style features (B, 2048, 2304) in fp32 (2304 feature steps at stride 4 frames),
videos of different lengths padded to 2304 with a boolean validity mask. Backbone: two masked Conv1d
layers (2048 -> 512, kernel 3) with LayerNorm over channels and ReLU, then a 6-level transformer pyramid:
level 0 two pre-LN transformer blocks at full length, each following level a stride-2 max-pool of the
sequence then one block; attention is local (window 19) realised as F.scaled_dot_product_attention with a
banded boolean attn_mask combined with the key padding mask (4 heads of 128). Heads shared across levels:
classification (3 x Conv1d 512 -> 512 + Conv1d -> 20 classes, prior bias) and regression (3 x Conv1d +
Conv1d -> 2 distances, ReLU, per-level learned Scale).

Label assignment: 8 random ground-truth segments per video; every pyramid point inside a segment (with
centre sampling radius 1.5 strides) whose maximum regression distance lies in that level's range is
positive for the shortest such segment; torchvision.ops.sigmoid_focal_loss over valid points and a 1-D
DIoU loss on positives, both normalised by an EMA of the positive count. AdamW (lr 1e-4, wd 0.05) and an
EMA copy of the model through torch.optim.swa_utils.AveragedModel(get_ema_multi_avg_fn(0.999)).

Inference with the EMA model under torch.inference_mode at batch 4: sigmoid scores, the top 2,000
candidates per video, segments decoded from the distances, torchvision.ops.batched_nms on the segments
drawn as boxes (class-aware, IoU 0.5), 200 kept.

Phases: set-up; first step (batch 16); 4 more steps; inference. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torchvision.ops import batched_nms, sigmoid_focal_loss

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19905)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, T, C_IN, STEPS, EVAL_B = 2, 256, 64, 1, 2
else:
    B, T, C_IN, STEPS, EVAL_B = 16, 2304, 2048, 4, 4
D, HEADS, WINDOW, LEVELS, N_CLASSES, N_GT = 512, 4, 19, 6, 20, 8
REG_RANGES = [(0, 4), (4, 8), (8, 16), (16, 32), (32, 64), (64, 10000)]


def report(tag):
    if device == "cuda":
        print(
            f"[{tag}] max_memory_allocated={torch.cuda.max_memory_allocated()} "
            f"memory_reserved={torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ChannelLayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):  # (B, C, T)
        return self.ln(x.transpose(1, 2)).transpose(1, 2)


class MaskedConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 3, padding=1)
        self.norm = ChannelLayerNorm(cout)

    def forward(self, x, mask):
        return F.relu(self.norm(self.conv(x) * mask.unsqueeze(1).to(x.dtype)))


class LocalBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, mask):  # x (B, T, D), mask (B, T)
        b, t, _ = x.shape
        pos = torch.arange(t, device=x.device)
        band = (pos[:, None] - pos[None, :]).abs() <= WINDOW // 2
        attn_mask = band[None, None] & mask[:, None, None, :]
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D)) * mask.unsqueeze(-1)
        return x + self.mlp(self.ln2(x)) * mask.unsqueeze(-1)


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * self.s


class ActionFormer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.ModuleList([MaskedConv(C_IN, D), MaskedConv(D, D)])
        self.stem = nn.ModuleList([LocalBlock(), LocalBlock()])
        self.branch = nn.ModuleList([LocalBlock() for _ in range(LEVELS - 1)])
        self.cls_convs = nn.ModuleList([MaskedConv(D, D) for _ in range(3)])
        self.cls_out = nn.Conv1d(D, N_CLASSES, 3, padding=1)
        nn.init.constant_(self.cls_out.bias, -4.595)  # prior 0.01
        self.reg_convs = nn.ModuleList([MaskedConv(D, D) for _ in range(3)])
        self.reg_out = nn.Conv1d(D, 2, 3, padding=1)
        self.scales = nn.ModuleList([Scale() for _ in range(LEVELS)])

    def forward(self, feats, mask):
        x = feats
        for layer in self.embed:
            x = layer(x, mask)
        x = x.transpose(1, 2)
        for blk in self.stem:
            x = blk(x, mask)
        levels, masks = [x], [mask]
        for blk in self.branch:
            x = F.max_pool1d(x.transpose(1, 2), 3, 2, 1).transpose(1, 2)
            mask = mask[:, ::2]
            x = blk(x, mask)
            levels.append(x)
            masks.append(mask)
        cls_out, reg_out = [], []
        for lvl, (x, m) in enumerate(zip(levels, masks, strict=True)):
            h = x.transpose(1, 2)
            c = h
            for layer in self.cls_convs:
                c = layer(c, m)
            cls_out.append(self.cls_out(c).transpose(1, 2))
            r = h
            for layer in self.reg_convs:
                r = layer(r, m)
            reg_out.append(F.relu(self.scales[lvl](self.reg_out(r))).transpose(1, 2))
        return torch.cat(cls_out, 1), torch.cat(reg_out, 1), torch.cat(masks, 1)


def make_points(t):
    pts = []
    for lvl in range(LEVELS):
        stride = 2**lvl
        n = (t + stride - 1) // stride
        centre = torch.arange(n, device=device, dtype=torch.float32) * stride
        lo, hi = REG_RANGES[lvl]
        pts.append(
            torch.stack(
                [
                    centre,
                    torch.full_like(centre, lo),
                    torch.full_like(centre, hi),
                    torch.full_like(centre, stride),
                ],
                1,
            )
        )
    return torch.cat(pts)  # (N, 4)


POINTS = make_points(T)


def make_batch(b):
    feats = torch.randn(b, C_IN, T, device=device)
    lengths = torch.randint(T // 2, T + 1, (b,), device=device)
    mask = torch.arange(T, device=device)[None] < lengths[:, None]
    starts = torch.rand(b, N_GT, device=device) * (lengths[:, None] - 64).float()
    durs = 4 + torch.rand(b, N_GT, device=device) * 200
    segs = torch.stack([starts, torch.minimum(starts + durs, lengths[:, None].float() - 1)], -1)
    labels = torch.randint(0, N_CLASSES, (b, N_GT), device=device)
    return feats, mask, segs, labels


@torch.no_grad()
def assign(segs, labels):
    pt = POINTS[None, :, None, 0]
    left = pt - segs[:, None, :, 0]
    right = segs[:, None, :, 1] - pt
    dist = torch.stack([left, right], -1)  # (B, N, K, 2)
    centre = 0.5 * (segs[..., 0] + segs[..., 1])[:, None]
    radius = 1.5 * POINTS[None, :, None, 3]
    in_centre = (pt - centre).abs() <= radius
    inside = dist.min(-1).values > 0
    maxd = dist.max(-1).values
    in_range = (maxd >= POINTS[None, :, None, 1]) & (maxd <= POINTS[None, :, None, 2])
    length = (segs[..., 1] - segs[..., 0])[:, None].expand_as(maxd).clone()
    length.masked_fill_(~(inside & in_centre & in_range), float("inf"))
    min_len, gt_idx = length.min(-1)
    pos = torch.isfinite(min_len)
    cls_t = F.one_hot(torch.gather(labels, 1, gt_idx), N_CLASSES).float() * pos.unsqueeze(-1)
    reg_t = (
        torch.gather(dist, 2, gt_idx[..., None, None].expand(-1, -1, 1, 2)).squeeze(2) / POINTS[None, :, 3:4]
    )
    return cls_t, reg_t, pos


def diou_1d(pred, target):
    lp, rp = pred[:, 0], pred[:, 1]
    lg, rg = target[:, 0], target[:, 1]
    inter = torch.minimum(lp, lg) + torch.minimum(rp, rg)
    union = lp + rp + lg + rg - inter
    iou = inter / union.clamp(min=1e-8)
    enclose = torch.maximum(lp, lg) + torch.maximum(rp, rg)
    centre_d = (rp - lp) - (rg - lg)
    return (1 - iou + (centre_d / enclose.clamp(min=1e-8)) ** 2 / 4).sum()


model = ActionFormer().to(device)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
norm_ema = 100.0
print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M, points {POINTS.shape[0]}")
report("setup")


def train_step():
    global norm_ema
    model.train()
    feats, mask, segs, labels = make_batch(B)
    cls_t, reg_t, pos = assign(segs, labels)
    cls_logits, reg, valid = model(feats, mask)
    n_pos = pos.sum().item()
    norm_ema = 0.9 * norm_ema + 0.1 * max(n_pos, 1)
    cls_loss = sigmoid_focal_loss(cls_logits[valid], cls_t[valid], reduction="sum") / norm_ema
    reg_loss = diou_1d(reg[pos], reg_t[pos]) / norm_ema
    loss = cls_loss + reg_loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    ema.update_parameters(model)
    return loss.item(), n_pos


loss, n_pos = train_step()
print(f"step 0 loss {loss:.4f} positives {n_pos}")
report("first step")
for _ in range(STEPS):
    loss, n_pos = train_step()
print(f"step {STEPS} loss {loss:.4f} positives {n_pos}")
report("train")

ema.eval()
with torch.inference_mode():
    feats, mask, _, _ = make_batch(EVAL_B)
    cls_logits, reg, valid = ema.module(feats, mask)
    scores = cls_logits.sigmoid() * valid.unsqueeze(-1)
    results = []
    for i in range(EVAL_B):
        flat = scores[i].flatten()
        top, idx = flat.topk(2000)
        pt_idx, cls_idx = idx // N_CLASSES, idx % N_CLASSES
        centre, stride = POINTS[pt_idx, 0], POINTS[pt_idx, 3]
        seg = torch.stack([centre - reg[i, pt_idx, 0] * stride, centre + reg[i, pt_idx, 1] * stride], -1)
        boxes = torch.stack([seg[:, 0], torch.zeros_like(top), seg[:, 1], torch.ones_like(top)], -1)
        keep = batched_nms(boxes, top, cls_idx, 0.5)[:200]
        results.append((seg[keep].cpu(), top[keep].cpu(), cls_idx[keep].cpu()))
print(f"detections per video {[r[0].shape[0] for r in results]}")
if device == "cuda":
    print(f"[inference] max_memory_allocated={torch.cuda.max_memory_allocated()}")
