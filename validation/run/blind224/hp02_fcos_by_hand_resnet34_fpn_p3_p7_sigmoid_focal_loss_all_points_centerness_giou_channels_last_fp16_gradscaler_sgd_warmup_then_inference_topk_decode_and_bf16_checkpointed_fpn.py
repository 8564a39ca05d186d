"""FCOS (Tian et al. 2019) written by hand: a torchvision ResNet-34 (random init) feeding an FPN
(P3-P5 laterals + 3x3 outputs, P6/P7 by strided 3x3 convs on P5), a shared head of 4 conv3x3 + GroupNorm(32)
+ ReLU towers for classification and regression, centerness on the regression tower, per-level learned scales.

Targets are fixed in size: every point on every level gets a class (or background) and ltrb distances to
the smallest of T=10 random boxes per image that contains it, computed densely ([points, T] tensors, no
nonzero); the size-of-interest ranges per level mask the assignment. Losses over all points:
torchvision.ops.sigmoid_focal_loss (sum / num positives), GIoU on ltrb boxes weighted by the positives'
centerness targets, BCE-with-logits for centerness.

Phases: 4 steps in channels_last under fp16 autocast with a GradScaler, SGD momentum 0.9 with a linear
warmup (LambdaLR), batch 16 at 640 x 640; inference_mode decode (sigmoid scores times centerness,
per-image top-1000 over all levels, boxes decoded and clipped) at batch 32; 3 steps under bf16 autocast with
the FPN run through torch.utils.checkpoint (non-reentrant) at batch 16 on 768 x 768. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint
from torchvision.ops import sigmoid_focal_loss

torch.manual_seed(2242)
device = "cuda"
C, T, STRIDES = 80, 10, (8, 16, 32, 64, 128)
RANGES = ((0, 64), (64, 128), (128, 256), (256, 512), (512, 1e8))


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class FPN(nn.Module):
    def __init__(self, chans=(128, 256, 512), d=256):
        super().__init__()
        self.lat = nn.ModuleList(nn.Conv2d(c, d, 1) for c in chans)
        self.out = nn.ModuleList(nn.Conv2d(d, d, 3, padding=1) for _ in chans)
        self.p6 = nn.Conv2d(d, d, 3, 2, 1)
        self.p7 = nn.Conv2d(d, d, 3, 2, 1)

    def forward(self, c3, c4, c5):
        l5 = self.lat[2](c5)
        l4 = self.lat[1](c4) + F.interpolate(l5, size=c4.shape[-2:], mode="nearest")
        l3 = self.lat[0](c3) + F.interpolate(l4, size=c3.shape[-2:], mode="nearest")
        p3, p4, p5 = self.out[0](l3), self.out[1](l4), self.out[2](l5)
        p6 = self.p6(p5)
        p7 = self.p7(F.relu(p6))
        return [p3, p4, p5, p6, p7]


def tower(d=256):
    layers = []
    for _ in range(4):
        layers += [nn.Conv2d(d, d, 3, padding=1), nn.GroupNorm(32, d), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class FCOS(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet34(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2)
        self.layer3, self.layer4 = r.layer3, r.layer4
        self.fpn = FPN()
        self.cls_tower, self.reg_tower = tower(), tower()
        self.cls = nn.Conv2d(256, C, 3, padding=1)
        self.reg = nn.Conv2d(256, 4, 3, padding=1)
        self.ctr = nn.Conv2d(256, 1, 3, padding=1)
        self.scales = nn.Parameter(torch.ones(5))
        nn.init.constant_(self.cls.bias, -4.6)
        self.ckpt = False

    def forward(self, x):
        c3 = self.stem(x)
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        feats = checkpoint(self.fpn, c3, c4, c5, use_reentrant=False) if self.ckpt else self.fpn(c3, c4, c5)
        cls, reg, ctr = [], [], []
        for i, f in enumerate(feats):
            ct, rt = self.cls_tower(f), self.reg_tower(f)
            cls.append(self.cls(ct).flatten(2))
            reg.append((self.scales[i] * self.reg(rt)).float().exp().flatten(2) * STRIDES[i])
            ctr.append(self.ctr(rt).flatten(2))
        return torch.cat(cls, 2).transpose(1, 2), torch.cat(reg, 2).transpose(1, 2), torch.cat(ctr, 2)[:, 0]


def points(res):
    pts, lo, hi = [], [], []
    for s, (a, b) in zip(STRIDES, RANGES):
        n = (res + s - 1) // s
        ys, xs = torch.meshgrid(torch.arange(n, device=device), torch.arange(n, device=device), indexing="ij")
        p = torch.stack([xs.flatten(), ys.flatten()], 1).float() * s + s // 2
        pts.append(p)
        lo.append(torch.full((p.shape[0],), float(a), device=device))
        hi.append(torch.full((p.shape[0],), float(b), device=device))
    return torch.cat(pts), torch.cat(lo), torch.cat(hi)


def assign(pts, lo, hi, boxes, labels):
    # boxes [B, T, 4] xyxy; returns cls target [B, P], ltrb [B, P, 4], pos mask [B, P]
    l = pts[None, :, None, 0] - boxes[:, None, :, 0]
    t = pts[None, :, None, 1] - boxes[:, None, :, 1]
    r = boxes[:, None, :, 2] - pts[None, :, None, 0]
    b = boxes[:, None, :, 3] - pts[None, :, None, 1]
    ltrb = torch.stack([l, t, r, b], -1)
    inside = ltrb.min(-1).values > 0
    m = ltrb.max(-1).values
    ok = inside & (m >= lo[None, :, None]) & (m <= hi[None, :, None])
    area = ((boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1]))[:, None, :].expand_as(m)
    area = torch.where(ok, area, torch.full_like(area, float("inf")))
    best_area, best = area.min(-1)
    pos = torch.isfinite(best_area)
    cls_t = torch.where(pos, labels.gather(1, best), torch.full_like(best, C))
    ltrb_t = ltrb.gather(2, best[..., None, None].expand(-1, -1, 1, 4)).squeeze(2)
    return cls_t, ltrb_t, pos


def ltrb_giou_loss(pred, tgt):
    pl, pt, pr, pb = pred.unbind(-1)
    tl, tt, tr, tb = tgt.unbind(-1)
    pa = (pl + pr) * (pt + pb)
    ta = (tl + tr) * (tt + tb)
    iw = torch.min(pl, tl) + torch.min(pr, tr)
    ih = torch.min(pt, tt) + torch.min(pb, tb)
    inter = iw * ih
    union = pa + ta - inter
    cw = torch.max(pl, tl) + torch.max(pr, tr)
    ch = torch.max(pt, tt) + torch.max(pb, tb)
    enc = cw * ch + 1e-7
    giou = inter / union - (enc - union) / enc
    return 1 - giou


def batch(b, res):
    x = torch.randn(b, 3, res, res, device=device).contiguous(memory_format=torch.channels_last)
    xy = torch.rand(b, T, 2, device=device) * res * 0.7
    wh = torch.rand(b, T, 2, device=device) * res * 0.3 + 16
    return x, torch.cat([xy, (xy + wh).clamp(max=res)], -1), torch.randint(0, C, (b, T), device=device)


def step(x, boxes, labels, dtype, scaler=None):
    pts, lo, hi = points(x.shape[-1])
    cls_t, ltrb_t, pos = assign(pts, lo, hi, boxes, labels)
    with torch.autocast("cuda", dtype=dtype):
        cls, reg, ctr = model(x)
    npos = pos.sum().clamp(min=1).float()
    onehot = F.one_hot(cls_t, C + 1)[..., :C].to(cls.dtype)
    l_cls = sigmoid_focal_loss(cls.float(), onehot.float(), reduction="sum") / npos
    lr_, tb_ = ltrb_t.clamp(min=1e-3), ltrb_t.clamp(min=1e-3)
    ctr_t = torch.sqrt((torch.min(lr_[..., 0], lr_[..., 2]) / torch.max(lr_[..., 0], lr_[..., 2]))
                       * (torch.min(tb_[..., 1], tb_[..., 3]) / torch.max(tb_[..., 1], tb_[..., 3])))
    w = ctr_t * pos
    l_box = (ltrb_giou_loss(reg, ltrb_t.clamp(min=0)) * w).sum() / w.sum().clamp(min=1e-6)
    l_ctr = (F.binary_cross_entropy_with_logits(ctr.float(), ctr_t, reduction="none") * pos).sum() / npos
    loss = l_cls + l_box + l_ctr
    opt.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    sched.step()
    print(f"loss {loss.item():.4f}")


model = FCOS().to(device).to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 100))
scaler = torch.amp.GradScaler("cuda")

model.train()
for _ in range(4):
    step(*batch(16, 640), torch.float16, scaler)
report("fp16 train 640")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    x = torch.randn(32, 3, 640, 640, device=device).contiguous(memory_format=torch.channels_last)
    cls, reg, ctr = model(x)
    pts, _, _ = points(640)
    scores = (cls.float().sigmoid() * ctr.float().sigmoid()[..., None]).sqrt()
    top, idx = scores.flatten(1).topk(1000, dim=1)
    pidx, label = idx // C, idx % C
    p = pts[pidx]
    d = reg.gather(1, pidx[..., None].expand(-1, -1, 4))
    boxes = torch.cat([p - d[..., :2], p + d[..., 2:]], -1).clamp(0, 640)
print("decoded", boxes.shape, top[:, 0].mean().item())
del cls, reg, ctr, scores, top, idx, boxes, x, d, p
report("inference decode")

model.train()
model.ckpt = True
for _ in range(3):
    step(*batch(16, 768), torch.bfloat16)
report("bf16 checkpointed fpn 768")
