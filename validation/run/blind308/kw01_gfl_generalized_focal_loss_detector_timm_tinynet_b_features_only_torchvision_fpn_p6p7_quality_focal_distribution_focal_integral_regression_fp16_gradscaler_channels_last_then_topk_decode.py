"""A GFL (Generalized Focal Loss, Li et al. 2020) dense detector written by hand, as one-stage detection
codebases build it. Backbone: timm 1.0.29's `tinynet_b` with `features_only=True, out_indices=(2, 3, 4)`
(strides 8/16/32); neck: `torchvision.ops.FeaturePyramidNetwork` at 128 channels with `LastLevelP6P7` (five
levels, strides 8-128); head: shared 4-conv GroupNorm towers, a joint classification-quality branch (20
classes) and a general distribution regression branch (4 x 17 bins, reg_max 16) with a learnable scale per
level. Targets (static shapes): 8 random boxes an image, every point inside a box (smallest box wins) is
positive. Losses: Quality Focal Loss (sigmoid BCE against the IoU of the decoded box, times |sigma -
IoU|^2), Distribution Focal Loss (cross-entropy to the two bins around each distance, linear weights), GIoU
of the integral (softmax-expectation) boxes, all masked by positives and normalized by their count.
Phase 1: building the model, `SGD(momentum=0.9, nesterov=True)` with no decay on norms/biases and a LambdaLR
warmup.
Phase 2: 4 steps at 16 x 512 x 512, channels-last under fp16 autocast with `torch.amp.GradScaler`.
Phase 3: `model.eval()` under `torch.inference_mode()` + fp16 autocast at 32 x 512 x 512: sigmoid scores,
top-1000 of every image over points x classes, integral boxes gathered for them (no NMS).
Phase 4: the same at 8 x 768 x 1024 after `empty_cache()`.
4 phases."""

import timm
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import FeaturePyramidNetwork, generalized_box_iou_loss
from torchvision.ops.feature_pyramid_network import LastLevelP6P7

torch.manual_seed(30801)
dev = "cuda"
NUM_CLASSES, REG_MAX, CH, G = 20, 16, 128, 8
STRIDES = (8, 16, 32, 64, 128)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def tower():
    layers = []
    for _ in range(4):
        layers += [nn.Conv2d(CH, CH, 3, padding=1, bias=False), nn.GroupNorm(32, CH), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class GFL(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model("tinynet_b", features_only=True, out_indices=(2, 3, 4))
        chans = self.backbone.feature_info.channels()
        self.fpn = FeaturePyramidNetwork(chans, CH, extra_blocks=LastLevelP6P7(CH, CH))
        self.cls_tower, self.reg_tower = tower(), tower()
        self.gfl_cls = nn.Conv2d(CH, NUM_CLASSES, 3, padding=1)
        self.gfl_reg = nn.Conv2d(CH, 4 * (REG_MAX + 1), 3, padding=1)
        self.scales = nn.Parameter(torch.ones(len(STRIDES)))
        nn.init.constant_(self.gfl_cls.bias, -4.595)

    def forward(self, x):
        feats = self.backbone(x)
        pyramid = self.fpn({str(i): f for i, f in enumerate(feats)})
        cls_out, reg_out = [], []
        for i, f in enumerate(pyramid.values()):
            c = self.gfl_cls(self.cls_tower(f))
            r = self.gfl_reg(self.reg_tower(f)) * self.scales[i]
            cls_out.append(c.flatten(2))
            reg_out.append(r.flatten(2))
        cls = torch.cat(cls_out, 2).transpose(1, 2)  # B, P, C
        reg = torch.cat(reg_out, 2).transpose(1, 2)  # B, P, 4 * 17
        return cls, reg


def points_for(h, w):
    pts, strides = [], []
    for s in STRIDES:
        fh, fw = -(-h // s), -(-w // s)
        if s > 32:
            fh, fw = -(-h // 32), -(-w // 32)
            for _ in range(STRIDES.index(s) - 2):
                fh, fw = (fh - 1) // 2 + 1, (fw - 1) // 2 + 1
        ys, xs = torch.meshgrid(torch.arange(fh, device=dev), torch.arange(fw, device=dev), indexing="ij")
        p = torch.stack([xs, ys], -1).reshape(-1, 2).float() * s + s // 2
        pts.append(p)
        strides.append(torch.full((p.shape[0],), float(s), device=dev))
    return torch.cat(pts), torch.cat(strides)


def integral(reg):
    prob = reg.float().reshape(*reg.shape[:-1], 4, REG_MAX + 1).softmax(-1)
    return prob @ torch.arange(REG_MAX + 1, device=reg.device, dtype=prob.dtype)


def distance2bbox(points, dist, stride):
    d = dist * stride[:, None]
    return torch.stack(
        [
            points[:, 0] - d[..., 0],
            points[:, 1] - d[..., 1],
            points[:, 0] + d[..., 2],
            points[:, 1] + d[..., 3],
        ],
        -1,
    )


def pairwise_iou(a, b):
    lt, rb = torch.maximum(a[..., :2], b[..., :2]), torch.minimum(a[..., 2:], b[..., 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    return inter / (area_a + area_b - inter + 1e-6)


def random_targets(b, h, w):
    xy = torch.rand(b, G, 2, device=dev) * torch.tensor([w * 0.7, h * 0.7], device=dev)
    wh = torch.rand(b, G, 2, device=dev) * torch.tensor([w * 0.3, h * 0.3], device=dev) + 24
    boxes = torch.cat([xy, xy + wh], -1)
    labels = torch.randint(0, NUM_CLASSES, (b, G), device=dev)
    return boxes, labels


def gfl_loss(cls, reg, points, strides, boxes, labels):
    px, py = points[None, :, None, 0], points[None, :, None, 1]
    inside = (px > boxes[:, None, :, 0]) & (py > boxes[:, None, :, 1])
    inside &= (px < boxes[:, None, :, 2]) & (py < boxes[:, None, :, 3])
    area = ((boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1]))[:, None, :].expand_as(inside)
    area = torch.where(inside, area, torch.full_like(area, float("inf")))
    min_area, gt_idx = area.min(-1)
    pos = torch.isfinite(min_area)  # B, P
    gt_boxes = torch.gather(boxes, 1, gt_idx[..., None].expand(-1, -1, 4))
    gt_labels = torch.gather(labels, 1, gt_idx)
    num_pos = pos.sum().clamp(min=1).float()

    dist_pred = integral(reg)  # B, P, 4 in stride units
    pred_boxes = distance2bbox(points, dist_pred, strides)
    with torch.no_grad():
        score = pairwise_iou(pred_boxes.detach(), gt_boxes) * pos
    target = torch.zeros_like(cls, dtype=torch.float32)
    target.scatter_(2, gt_labels[..., None], score[..., None])
    target = target * pos[..., None]
    logits = cls.float()
    sigma = logits.sigmoid()
    qfl = F.binary_cross_entropy_with_logits(logits, target, reduction="none") * (sigma - target).abs().pow(2)
    loss_qfl = qfl.sum() / num_pos

    gt_dist = (
        torch.stack(
            [
                px[..., 0] - gt_boxes[..., 0],
                py[..., 0] - gt_boxes[..., 1],
                gt_boxes[..., 2] - px[..., 0],
                gt_boxes[..., 3] - py[..., 0],
            ],
            -1,
        )
        / strides[None, :, None]
    )
    gt_dist = gt_dist.clamp(0, REG_MAX - 0.01)
    left = gt_dist.long()
    w_left = left.float() + 1 - gt_dist
    logp = reg.float().reshape(*reg.shape[:-1], 4, REG_MAX + 1).log_softmax(-1)
    dfl = -(
        logp.gather(-1, left[..., None])[..., 0] * w_left
        + logp.gather(-1, left[..., None] + 1)[..., 0] * (1 - w_left)
    )
    weight = score.detach().clamp(min=0.05) * pos
    loss_dfl = (dfl.mean(-1) * weight).sum() / num_pos / 4
    giou = generalized_box_iou_loss(pred_boxes.reshape(-1, 4), gt_boxes.reshape(-1, 4), reduction="none")
    loss_giou = (giou.reshape(pos.shape) * weight).sum() / num_pos * 2
    return loss_qfl + loss_dfl + loss_giou


model = GFL().to(dev).to(memory_format=torch.channels_last)
decay, no_decay = [], []
for p in model.parameters():
    (no_decay if p.ndim <= 1 else decay).append(p)
optimizer = torch.optim.SGD(
    [{"params": decay, "weight_decay": 5e-5}, {"params": no_decay, "weight_decay": 0.0}],
    lr=0.01,
    momentum=0.9,
    nesterov=True,
)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: min(1.0, (it + 1) / 500))
scaler = torch.amp.GradScaler("cuda")
report("phase1 build")

B, H, W = 16, 512, 512
points, strides = points_for(H, W)
model.train()
for step in range(4):
    images = torch.randn(B, 3, H, W, device=dev).contiguous(memory_format=torch.channels_last)
    boxes, labels = random_targets(B, H, W)
    with torch.autocast("cuda", dtype=torch.float16):
        cls, reg = model(images)
        loss = gfl_loss(cls, reg, points, strides, boxes, labels)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 35.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f}")
del images, boxes, labels, cls, reg, loss
report("phase2 train")


def detect(images, points, strides, k=1000):
    cls, reg = model(images)
    scores = cls.float().sigmoid().flatten(1)  # B, P * C
    top, idx = scores.topk(k, dim=1)
    point_idx, label = idx // NUM_CLASSES, idx % NUM_CLASSES
    dist = integral(torch.gather(reg, 1, point_idx[..., None].expand(-1, -1, reg.shape[-1])))
    pts, st = points[point_idx], strides[point_idx]
    d = dist * st[..., None]
    boxes = torch.stack(
        [pts[..., 0] - d[..., 0], pts[..., 1] - d[..., 1], pts[..., 0] + d[..., 2], pts[..., 1] + d[..., 3]],
        -1,
    )
    return boxes, top, label


model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    images = torch.randn(32, 3, H, W, device=dev).contiguous(memory_format=torch.channels_last)
    boxes, top, label = detect(images, points, strides)
    print("eval", tuple(boxes.shape), float(top.mean()))
del images, boxes, top, label
report("phase3 eval 512")

torch.cuda.empty_cache()
H2, W2 = 768, 1024
points2, strides2 = points_for(H2, W2)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    images = torch.randn(8, 3, H2, W2, device=dev).contiguous(memory_format=torch.channels_last)
    boxes, top, label = detect(images, points2, strides2)
    print("eval large", tuple(boxes.shape), float(top.mean()))
report("phase4 eval 768x1024")
