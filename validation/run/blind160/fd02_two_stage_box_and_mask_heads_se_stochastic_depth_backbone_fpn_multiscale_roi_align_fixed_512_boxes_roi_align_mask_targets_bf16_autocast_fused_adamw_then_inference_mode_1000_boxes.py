"""The second stage of a Mask R-CNN-style detector trained on fixed proposals (no RPN, no nms):
a hand-written backbone of inverted-residual blocks built from torchvision.ops pieces
(Conv2dNormActivation, SqueezeExcitation at a quarter of the expanded width, StochasticDepth in
"row" mode with linearly rising drop rates up to 0.2), four stages at strides 4-32 (48, 96, 192,
384 channels) into torchvision.ops.FeaturePyramidNetwork (256 channels, LastLevelMaxPool), then
MultiScaleRoIAlign over p2-p5 (7 x 7, sampling ratio 2) for 512 random boxes per image into
torchvision's TwoMLPHead (1,024) and FastRCNNPredictor (91 classes), and a second
MultiScaleRoIAlign (14 x 14) for the first 128 boxes into MaskRCNNHeads (4 convs of 256) and
MaskRCNNPredictor (28 x 28 logits); the mask targets cut from full-image random masks with
torchvision.ops.roi_align (aligned=True) as torchvision's project_masks_on_boxes does. Batch 4 of
640 x 640, bf16 autocast (roi_align runs in fp32 under torchvision's autocast rule), fused AdamW
lr 1e-4 weight decay 0.05, cross entropy + smooth L1 on class-specific deltas + BCE on the masks,
3 steps (each its own phase); then inference_mode at batch 2 of 800 x 800 with 1,000 boxes per
image, softmax scores and the boxes' masks for 100 boxes per image; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
from torchvision.models.detection.mask_rcnn import MaskRCNNHeads, MaskRCNNPredictor
from torchvision.ops import (
    FeaturePyramidNetwork,
    MultiScaleRoIAlign,
    SqueezeExcitation,
    StochasticDepth,
    roi_align,
)
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool
from torchvision.ops.misc import Conv2dNormActivation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16002)
if SMALL:
    B, SIDE, BOXES, MASK_BOXES, EVAL_B, EVAL_SIDE, EVAL_BOXES, EVAL_MASKS, STEPS = (
        2,
        128,
        16,
        4,
        1,
        160,
        32,
        8,
        3,
    )
else:
    B, SIDE, BOXES, MASK_BOXES, EVAL_B, EVAL_SIDE, EVAL_BOXES, EVAL_MASKS, STEPS = (
        4,
        640,
        512,
        128,
        2,
        800,
        1000,
        100,
        3,
    )
CLASSES = 91
device = "cuda" if torch.cuda.is_available() else "cpu"


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand, sd_prob):
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            Conv2dNormActivation(cin, mid, kernel_size=1, activation_layer=nn.SiLU),
            Conv2dNormActivation(
                mid, mid, kernel_size=3, stride=stride, groups=mid, activation_layer=nn.SiLU
            ),
            SqueezeExcitation(mid, max(1, cin // 4), activation=nn.SiLU),
            Conv2dNormActivation(mid, cout, kernel_size=1, activation_layer=None),
        )
        self.stochastic_depth = StochasticDepth(sd_prob, "row")

    def forward(self, x):
        out = self.block(x)
        if self.use_res:
            out = self.stochastic_depth(out) + x
        return out


class Backbone(nn.Module):
    def __init__(self, widths=(48, 96, 192, 384), depths=(2, 3, 4, 2), max_sd=0.2):
        super().__init__()
        self.stem = Conv2dNormActivation(3, 32, kernel_size=3, stride=2, activation_layer=nn.SiLU)
        total, i = sum(depths), 0
        self.stages = nn.ModuleList()
        cin = 32
        for w, d in zip(widths, depths, strict=True):
            blocks = []
            for j in range(d):
                blocks.append(InvertedResidual(cin, w, 2 if j == 0 else 1, 4, max_sd * i / total))
                cin = w
                i += 1
            self.stages.append(nn.Sequential(*blocks))
        self.fpn = FeaturePyramidNetwork(list(widths), 256, extra_blocks=LastLevelMaxPool())

    def forward(self, x):
        x = self.stem(x)
        feats = {}
        for k, stage in enumerate(self.stages):
            x = stage(x)
            feats[f"p{k + 2}"] = x
        return self.fpn(feats)


class SecondStage(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.box_roi_pool = MultiScaleRoIAlign(["p2", "p3", "p4", "p5"], output_size=7, sampling_ratio=2)
        self.box_head = TwoMLPHead(256 * 7 * 7, 1024)
        self.box_predictor = FastRCNNPredictor(1024, CLASSES)
        self.mask_roi_pool = MultiScaleRoIAlign(["p2", "p3", "p4", "p5"], output_size=14, sampling_ratio=2)
        self.mask_head = MaskRCNNHeads(256, [256, 256, 256, 256], 1)
        self.mask_predictor = MaskRCNNPredictor(256, 256, CLASSES)

    def forward(self, images, boxes, mask_boxes):
        shapes = [tuple(images.shape[-2:])] * images.shape[0]
        feats = self.backbone(images)
        box_feats = self.box_head(self.box_roi_pool(feats, boxes, shapes))
        class_logits, box_regression = self.box_predictor(box_feats)
        mask_feats = self.mask_head(self.mask_roi_pool(feats, mask_boxes, shapes))
        return class_logits, box_regression, self.mask_predictor(mask_feats)


def random_boxes(n, side):
    xy = torch.rand(n, 2, device=device) * side * 0.8
    wh = torch.rand(n, 2, device=device) * side * 0.3 + 8
    return torch.cat([xy, (xy + wh).clamp(max=side)], dim=1)


def project_masks_on_boxes(gt_masks, boxes, matched_idxs, M):
    matched_idxs = matched_idxs.to(boxes)
    rois = torch.cat([matched_idxs[:, None], boxes], dim=1)
    gt_masks = gt_masks[:, None].to(rois)
    return roi_align(gt_masks, rois, (M, M), 1.0, aligned=True)[:, 0]


model = SecondStage().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    images = torch.randn(B, 3, SIDE, SIDE, device=device)
    boxes = [random_boxes(BOXES, SIDE) for _ in range(B)]
    mask_boxes = [b[:MASK_BOXES] for b in boxes]
    labels = torch.randint(1, CLASSES, (B * BOXES,), device=device)
    reg_targets = torch.randn(B * BOXES, 4, device=device) * 0.1
    gt_masks = (torch.rand(B, SIDE, SIDE, device=device) > 0.5).to(torch.uint8)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        class_logits, box_regression, mask_logits = model(images, boxes, mask_boxes)
        loss_cls = F.cross_entropy(class_logits, labels)
        box_regression = box_regression.reshape(B * BOXES, CLASSES, 4)
        rows = torch.arange(B * BOXES, device=device)
        loss_box = (
            F.smooth_l1_loss(box_regression[rows, labels], reg_targets, beta=1 / 9, reduction="sum")
            / labels.numel()
        )
        mask_labels = torch.cat([labels.view(B, BOXES)[i, :MASK_BOXES] for i in range(B)])
        img_idx = torch.arange(B, device=device).repeat_interleave(MASK_BOXES)
        mask_targets = project_masks_on_boxes(gt_masks, torch.cat(mask_boxes), img_idx, 28)
        picked = mask_logits[torch.arange(mask_labels.numel(), device=device), mask_labels]
        loss_mask = F.binary_cross_entropy_with_logits(picked.float(), mask_targets)
        loss = loss_cls + loss_box + loss_mask
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del class_logits, box_regression, mask_logits, loss, picked, mask_targets, gt_masks
model.eval()
with (
    torch.inference_mode(),
    torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"),
):
    images = torch.randn(EVAL_B, 3, EVAL_SIDE, EVAL_SIDE, device=device)
    boxes = [random_boxes(EVAL_BOXES, EVAL_SIDE) for _ in range(EVAL_B)]
    class_logits, box_regression, masks = model(images, boxes, [b[:EVAL_MASKS] for b in boxes])
    scores = F.softmax(class_logits.float(), -1)
    best = scores[:, 1:].max(-1).values
    mask_probs = masks.float().sigmoid()
if device == "cuda":
    print(
        f"eval best {best.mean().item():.4f} masks {tuple(mask_probs.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
