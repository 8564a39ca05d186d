"""R-FCN (Dai et al. 2016) written by hand on a timm backbone, as detection code of that style composes it.
The backbone is timm 1.0.29's `cs3darknet_m` (`features_only=True, out_indices=(3,)`: the stride-16 map
of 384 channels), a 1x1 conv to 512 channels with ReLU, then two 1x1 convs making the position-sensitive
score maps: 7 x 7 x 21 for the classes (20 + background) and 7 x 7 x 4 for class-agnostic box deltas.
Every RoI is pooled by `torchvision.ops.ps_roi_align` (7 x 7 bins, spatial scale 1/16, sampling ratio 2)
and voted by the mean over its bins. Data (synthetic, seeded): 8 images of 3 x 640 x 640 a step, 6
ground-truth boxes each (labels 1..20), 256 RoIs an image (64 jittered ground truths and 192 random
boxes), labelled by `torchvision.ops.box_iou` (foreground at IoU >= 0.5, else background). Losses:
cross-entropy over the RoIs and `torchvision.ops.distance_box_iou_loss` of the decoded boxes (proposal
centre/size parametrisation) against their matched ground truths on the foreground RoIs. Phase 1:
building the model and timm's `Lars` through `create_optimizer_v2(model, "lars", momentum=0.9,
weight_decay=1e-4)` (no decay on biases and norms) with `MultiStepLRScheduler` (warmup 2 steps, decay at
6). Phase 2: 8 steps of fp16 autocast with `torch.amp.GradScaler`. Phase 3: `model.eval()` under
`torch.inference_mode()` and fp16 autocast on 2 batches of 8 images with 1,000 random RoIs each: softmax
scores, per-class boxes above 0.05, `clip_boxes_to_image`, `remove_small_boxes`, `batched_nms` (IoU 0.5)
and the top 100 per image.
3 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import MultiStepLRScheduler
from torch import nn
from torchvision.ops import (
    batched_nms,
    box_iou,
    clip_boxes_to_image,
    distance_box_iou_loss,
    ps_roi_align,
    remove_small_boxes,
)

torch.manual_seed(2901)
dev = "cuda"
B, SIZE, NUM_CLASSES, K = 8, 640, 21, 7


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class RFCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model(
            "cs3darknet_m", pretrained=False, features_only=True, out_indices=(3,)
        )
        ch = self.backbone.feature_info.channels()[-1]
        self.reduce = nn.Sequential(nn.Conv2d(ch, 512, 1), nn.ReLU(inplace=True))
        self.cls_maps = nn.Conv2d(512, K * K * NUM_CLASSES, 1)
        self.box_maps = nn.Conv2d(512, K * K * 4, 1)

    def forward(self, images, rois):
        feat = self.reduce(self.backbone(images)[-1])
        cls = ps_roi_align(self.cls_maps(feat), rois, K, spatial_scale=1 / 16, sampling_ratio=2)
        box = ps_roi_align(self.box_maps(feat), rois, K, spatial_scale=1 / 16, sampling_ratio=2)
        return cls.mean((2, 3)), box.mean((2, 3))


def decode(deltas, boxes):
    wh = boxes[:, 2:] - boxes[:, :2]
    ctr = boxes[:, :2] + 0.5 * wh
    ctr = ctr + deltas[:, :2].float() * 0.1 * wh
    wh = wh * torch.exp(deltas[:, 2:].float().clamp(max=4.0) * 0.2)
    return torch.cat([ctr - 0.5 * wh, ctr + 0.5 * wh], 1)


def random_boxes(n, lo=16.0, hi=320.0):
    xy = torch.rand(n, 2, device=dev) * (SIZE - hi)
    wh = lo + torch.rand(n, 2, device=dev) * (hi - lo)
    return torch.cat([xy, xy + wh], 1)


def batch():
    images = torch.randn(B, 3, SIZE, SIZE, device=dev)
    gts = [random_boxes(6, 48.0, 280.0) for _ in range(B)]
    labels = [torch.randint(1, NUM_CLASSES, (6,), device=dev) for _ in range(B)]
    rois, roi_labels, roi_targets = [], [], []
    for i in range(B):
        jitter = gts[i].repeat(11, 1)[:64] + torch.randn(64, 4, device=dev) * 12.0
        props = torch.cat([jitter, random_boxes(192)]).clamp(0, SIZE)
        props = torch.cat([props[:, :2].minimum(props[:, 2:]), props[:, :2].maximum(props[:, 2:]) + 1.0], 1)
        iou, idx = box_iou(props, gts[i]).max(1)
        roi_labels.append(torch.where(iou >= 0.5, labels[i][idx], 0))
        roi_targets.append(gts[i][idx])
        rois.append(torch.cat([torch.full((256, 1), float(i), device=dev), props], 1))
    return images, torch.cat(rois), torch.cat(roi_labels), torch.cat(roi_targets)


model = RFCN().to(dev)
optimizer = create_optimizer_v2(model, "lars", lr=0.02, momentum=0.9, weight_decay=1e-4)
scheduler = MultiStepLRScheduler(optimizer, decay_t=[6], decay_rate=0.1, warmup_t=2, warmup_lr_init=1e-3)
scaler = torch.amp.GradScaler("cuda")
print("params", sum(p.numel() for p in model.parameters()))
report("rfcn_cs3darknet_m_build_lars")

model.train()
for step in range(8):
    images, rois, roi_labels, roi_targets = batch()
    with torch.autocast("cuda", dtype=torch.float16):
        logits, deltas = model(images, rois)
        loss_cls = F.cross_entropy(logits.float(), roi_labels)
        fg = roi_labels > 0
        pred = decode(deltas[fg], rois[fg, 1:])
        loss_box = distance_box_iou_loss(pred, roi_targets[fg], reduction="mean")
        loss = loss_cls + loss_box
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step(step + 1)
print("train", round(loss_cls.item(), 3), round(loss_box.item(), 3), int(fg.sum()))
report("rfcn_train_fp16_gradscaler_lars")

del images, rois, roi_labels, roi_targets, logits, deltas, loss, pred
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    total = 0
    for _rep in range(2):
        images = torch.randn(B, 3, SIZE, SIZE, device=dev)
        props = [random_boxes(1000) for _ in range(B)]
        rois = torch.cat(
            [torch.cat([torch.full((1000, 1), float(i), device=dev), p], 1) for i, p in enumerate(props)]
        )
        logits, deltas = model(images, rois)
        scores = logits.float().softmax(-1).view(B, 1000, NUM_CLASSES)
        boxes = decode(deltas, rois[:, 1:]).view(B, 1000, 4)
        for i in range(B):
            s = scores[i, :, 1:]
            keep_roi, cls = (s > 0.05).nonzero(as_tuple=True)
            b = clip_boxes_to_image(boxes[i][keep_roi], (SIZE, SIZE))
            sc = s[keep_roi, cls]
            ok = remove_small_boxes(b, 1.0)
            b, sc, cls = b[ok], sc[ok], cls[ok]
            keep = batched_nms(b, sc, cls, 0.5)[:100]
            total += int(keep.numel())
print("eval detections", total)
report("rfcn_eval_inference_mode_batched_nms")
