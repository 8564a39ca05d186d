"""YOLOv8-style anchor-free detector trained the way ultralytics' v8DetectionLoss does it, written by hand
in plain PyTorch. A small CSP backbone (Conv-BN-SiLU stem, C2f blocks with split/cat bottlenecks, SPPF's
three chained 5x5 max pools), a PAN neck (nearest upsampling + cat + C2f, strided convs back down) and a
decoupled head per stride (8/16/32 -> 80x80 + 40x40 + 20x20 = 8,400 anchor points at 640 x 640): a box
branch of 4 x reg_max (16) distribution logits and an 80-class branch. Targets: synthetic, seeded, 1..40
boxes per image padded to 40 with a gt mask. The Task-Aligned Assigner by hand under no_grad: anchor
centres inside each gt (B, 40, 8400), align metric = score^0.5 * CIoU^6 over the dense (B, 40, 8400)
grid, `topk(10)` anchors per gt turned into a mask by `scatter_add_` of ones, an anchor claimed by several
gts resolved by the largest IoU (`argmax` + `one_hot`, unconditionally), the target index by `argmax`
over gts, targets gathered, the class targets scaled by the normalised align metric. Loss: BCE with
logits over all anchors and classes, CIoU and DFL (cross entropy on the two bins around each ltrb
distance, `floor` + linear weights) computed densely over every anchor and masked by the foreground
(no boolean indexing), weights 7.5 / 0.5 / 1.5. bf16 autocast, SGD nesterov (momentum 0.937,
weight decay 5e-4 on weights only via two param groups), 6 steps at batch 16.
Phase 2: inference_mode at batch 32: DFL decoded by softmax over 16 bins times `arange`, dist2bbox,
sigmoid scores, `topk(300)` over the flattened anchors x classes (no NMS), boxes gathered.
2 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2861)
dev = "cuda"
NC, REG_MAX, IMG, MAX_GT = 80, 16, 640, 40


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Conv(nn.Sequential):
    def __init__(self, c1, c2, k=1, s=1):
        super().__init__(
            nn.Conv2d(c1, c2, k, s, k // 2, bias=False),
            nn.BatchNorm2d(c2, eps=1e-3, momentum=0.03),
            nn.SiLU(),
        )


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut=True):
        super().__init__()
        self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=False):
        super().__init__()
        self.c = c2 // 2
        self.cv1 = Conv(c1, 2 * self.c)
        self.cv2 = Conv((2 + n) * self.c, c2)
        self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        c_ = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c_), Conv(c_ * 4, c2)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class YOLO(nn.Module):
    def __init__(self, w=(32, 64, 128, 256, 512), n=(1, 2, 2, 1)):
        super().__init__()
        self.b0 = Conv(3, w[0], 3, 2)
        self.b1 = nn.Sequential(Conv(w[0], w[1], 3, 2), C2f(w[1], w[1], n[0], True))
        self.b2 = nn.Sequential(Conv(w[1], w[2], 3, 2), C2f(w[2], w[2], n[1], True))  # P3
        self.b3 = nn.Sequential(Conv(w[2], w[3], 3, 2), C2f(w[3], w[3], n[2], True))  # P4
        self.b4 = nn.Sequential(Conv(w[3], w[4], 3, 2), C2f(w[4], w[4], n[3], True), SPPF(w[4], w[4]))  # P5
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n1 = C2f(w[4] + w[3], w[3])
        self.n2 = C2f(w[3] + w[2], w[2])
        self.d1 = Conv(w[2], w[2], 3, 2)
        self.n3 = C2f(w[2] + w[3], w[3])
        self.d2 = Conv(w[3], w[3], 3, 2)
        self.n4 = C2f(w[3] + w[4], w[4])
        ch = (w[2], w[3], w[4])
        c2, c3 = max(16, ch[0] // 4, REG_MAX * 4), max(ch[0], min(NC, 100))
        self.box = nn.ModuleList(
            nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * REG_MAX, 1)) for c in ch
        )
        self.cls = nn.ModuleList(
            nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, NC, 1)) for c in ch
        )
        for s, m in zip((8, 16, 32), self.cls, strict=False):
            m[-1].bias.data.fill_(math.log(5 / NC / (IMG / s) ** 2))

    def forward(self, x):
        p3 = self.b2(self.b1(self.b0(x)))
        p4 = self.b3(p3)
        p5 = self.b4(p4)
        h4 = self.n1(torch.cat([self.up(p5), p4], 1))
        o3 = self.n2(torch.cat([self.up(h4), p3], 1))
        o4 = self.n3(torch.cat([self.d1(o3), h4], 1))
        o5 = self.n4(torch.cat([self.d2(o4), p5], 1))
        outs = [torch.cat([self.box[i](f), self.cls[i](f)], 1) for i, f in enumerate((o3, o4, o5))]
        b = x.shape[0]
        return torch.cat([o.view(b, 4 * REG_MAX + NC, -1) for o in outs], 2)  # (B, 144, 8400)


def make_anchors(strides=(8, 16, 32)):
    pts, st = [], []
    for s in strides:
        h = w = IMG // s
        sy, sx = torch.meshgrid(
            torch.arange(h, device=dev) + 0.5, torch.arange(w, device=dev) + 0.5, indexing="ij"
        )
        pts.append(torch.stack((sx, sy), -1).view(-1, 2))
        st.append(torch.full((h * w, 1), float(s), device=dev))
    return torch.cat(pts), torch.cat(st)


def dist2bbox(dist, anchor):
    lt, rb = dist.chunk(2, -1)
    return torch.cat((anchor - lt, anchor + rb), -1)


def bbox_ciou(b1, b2, eps=1e-7):
    (x1, y1, x2, y2), (X1, Y1, X2, Y2) = b1.unbind(-1), b2.unbind(-1)
    w1, h1, w2, h2 = x2 - x1, y2 - y1 + eps, X2 - X1, Y2 - Y1 + eps
    inter = (torch.minimum(x2, X2) - torch.maximum(x1, X1)).clamp_(0) * (
        torch.minimum(y2, Y2) - torch.maximum(y1, Y1)
    ).clamp_(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = torch.maximum(x2, X2) - torch.minimum(x1, X1)
    chh = torch.maximum(y2, Y2) - torch.minimum(y1, Y1)
    c2 = cw**2 + chh**2 + eps
    rho2 = ((X1 + X2 - x1 - x2) ** 2 + (Y1 + Y2 - y1 - y2) ** 2) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


@torch.no_grad()
def assign(pd_scores, pd_bboxes, anc, gt_labels, gt_bboxes, mask_gt, topk=10, alpha=0.5, beta=6.0, eps=1e-9):
    b, a, _ = pd_scores.shape
    m = gt_bboxes.shape[1]
    lt, rb = gt_bboxes.view(-1, 1, 4).chunk(2, 2)
    deltas = torch.cat((anc[None] - lt, rb - anc[None]), 2).view(b, m, a, -1)
    mask_in = (deltas.amin(3) > eps).float()
    mask = mask_in * mask_gt  # (b, m, a)
    bidx = torch.arange(b, device=dev).view(-1, 1).expand(-1, m)
    scores = pd_scores[bidx, :, gt_labels.squeeze(-1)]  # (b, m, a)
    overlaps = bbox_ciou(gt_bboxes.unsqueeze(2), pd_bboxes.unsqueeze(1)).clamp_(0) * mask
    metric = scores.pow(alpha) * overlaps.pow(beta) * mask
    top_idx = torch.topk(metric, topk, dim=-1, largest=True).indices  # (b, m, topk)
    count = torch.zeros(b, m, a, dtype=torch.int8, device=dev)
    count.scatter_add_(-1, top_idx, torch.ones_like(top_idx, dtype=torch.int8))
    mask_pos = (count == 1).float() * mask
    fg = mask_pos.sum(-2)
    multi = (fg.unsqueeze(1) > 1).expand(-1, m, -1)
    best = F.one_hot(overlaps.argmax(1), m).permute(0, 2, 1).to(overlaps.dtype)
    mask_pos = torch.where(multi, best, mask_pos)
    fg = mask_pos.sum(-2)
    gt_idx = mask_pos.argmax(-2)  # (b, a)
    flat = gt_idx + torch.arange(b, device=dev).view(-1, 1) * m
    t_labels = gt_labels.flatten()[flat]
    t_bboxes = gt_bboxes.view(-1, 4)[flat]
    t_scores = F.one_hot(t_labels, NC) * (fg > 0).unsqueeze(-1)
    metric = metric * mask_pos
    pos_metric = metric.amax(-1, keepdim=True)
    pos_ov = (overlaps * mask_pos).amax(-1, keepdim=True)
    norm = (metric * pos_ov / (pos_metric + eps)).amax(-2).unsqueeze(-1)
    return t_bboxes, t_scores * norm, fg > 0


def targets(b):
    n = torch.randint(1, MAX_GT + 1, (b,))
    labels = torch.zeros(b, MAX_GT, 1, dtype=torch.long)
    boxes = torch.zeros(b, MAX_GT, 4)
    mask = torch.zeros(b, MAX_GT, 1)
    for i in range(b):
        k = int(n[i])
        c = torch.rand(k, 2) * IMG
        wh = torch.rand(k, 2) * 200 + 8
        boxes[i, :k] = torch.cat([(c - wh / 2).clamp(0, IMG), (c + wh / 2).clamp(0, IMG)], 1)
        labels[i, :k, 0] = torch.randint(0, NC, (k,))
        mask[i, :k] = 1
    return labels.to(dev), boxes.to(dev), mask.to(dev)


model = YOLO().to(dev)
anc_pts, stride_t = make_anchors()
proj = torch.arange(REG_MAX, dtype=torch.float, device=dev)
decay, no_decay = [], []
for p in model.parameters():
    (decay if p.ndim > 1 else no_decay).append(p)
opt = torch.optim.SGD(
    [{"params": decay, "weight_decay": 5e-4}, {"params": no_decay, "weight_decay": 0.0}],
    lr=0.01,
    momentum=0.937,
    nesterov=True,
)
bce = nn.BCEWithLogitsLoss(reduction="none")
B = 16
for _step in range(6):
    imgs = torch.rand(B, 3, IMG, IMG, device=dev)
    gt_labels, gt_bboxes, mask_gt = targets(B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        feats = model(imgs)
    pred_distri, pred_scores = feats.float().split((4 * REG_MAX, NC), 1)
    pred_scores = pred_scores.permute(0, 2, 1).contiguous()
    pred_distri = pred_distri.permute(0, 2, 1).contiguous()  # (B, A, 64)
    a = pred_distri.shape[1]
    pd_dist = pred_distri.view(B, a, 4, REG_MAX).softmax(3).matmul(proj)
    pred_bboxes = dist2bbox(pd_dist, anc_pts)  # grid units
    t_bboxes, t_scores, fg = assign(
        pred_scores.detach().sigmoid(),
        (pred_bboxes.detach() * stride_t),
        anc_pts * stride_t,
        gt_labels,
        gt_bboxes,
        mask_gt,
    )
    t_sum = max(t_scores.sum(), 1)
    loss_cls = bce(pred_scores, t_scores).sum() / t_sum
    t_bboxes = t_bboxes / stride_t
    weight = t_scores.sum(-1) * fg
    iou = bbox_ciou(pred_bboxes, t_bboxes)
    loss_box = ((1.0 - iou) * weight).sum() / t_sum
    lt, rb = t_bboxes.chunk(2, -1)
    t_ltrb = torch.cat((anc_pts - lt, rb - anc_pts), -1).clamp_(0, REG_MAX - 1 - 0.01)
    tl = t_ltrb.long()
    wl = tl + 1 - t_ltrb
    wr = 1 - wl
    pd = pred_distri.view(-1, REG_MAX)
    dfl = (
        F.cross_entropy(pd, tl.view(-1), reduction="none").view(tl.shape) * wl
        + F.cross_entropy(pd, (tl + 1).view(-1), reduction="none").view(tl.shape) * wr
    ).mean(-1)
    loss_dfl = (dfl * weight).sum() / t_sum
    loss = (7.5 * loss_box + 0.5 * loss_cls + 1.5 * loss_dfl) * B
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("train loss", round(loss.item(), 3), "fg", int(fg.sum().item()))
report("train_tal_dfl_ciou_bf16_sgd")

del loss, feats, pred_distri, pred_scores, pd_dist, pred_bboxes, iou, dfl, t_scores, t_bboxes, fg, weight, pd
model.eval()
with torch.inference_mode():
    imgs = torch.rand(32, 3, IMG, IMG, device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(imgs).float()
    box, cls = out.split((4 * REG_MAX, NC), 1)
    b, _, a = box.shape
    dist = box.view(b, 4, REG_MAX, a).softmax(2).transpose(2, 3).matmul(proj)  # (b, 4, a)
    xyxy = dist2bbox(dist.transpose(1, 2), anc_pts) * stride_t
    scores = cls.sigmoid().transpose(1, 2).reshape(b, -1)
    conf, idx = scores.topk(300, dim=1)
    det = torch.cat(
        [
            xyxy.gather(1, (idx // NC).unsqueeze(-1).expand(-1, -1, 4)),
            conf.unsqueeze(-1),
            (idx % NC).unsqueeze(-1).float(),
        ],
        -1,
    )
print("detections", tuple(det.shape), round(det[..., 4].mean().item(), 4))
report("inference_mode_dfl_decode_topk_300")
