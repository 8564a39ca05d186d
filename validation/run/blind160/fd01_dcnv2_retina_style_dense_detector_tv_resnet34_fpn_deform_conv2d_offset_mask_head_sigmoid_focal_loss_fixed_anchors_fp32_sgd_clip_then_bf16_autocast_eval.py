"""A RetinaNet-style dense detector with DCNv2 (modulated deformable convolution) towers, as
detection users write it with torchvision.ops: a torchvision resnet34 trunk from random weights
(C3, C4, C5 through IntermediateLayerGetter), torchvision.ops.FeaturePyramidNetwork to 256
channels with LastLevelP6P7 (P3-P7), and a shared head of 3 DeformConv2d layers per branch (each
with a plain 3 x 3 conv predicting 18 offsets and 9 sigmoid modulation masks, GroupNorm 32, ReLU),
classification logits over 9 anchors x 80 classes and 9 x 4 box deltas. Targets are dense and fixed
(no matching, no nms): a random one-hot class target per anchor with 2 % positives and box
targets; sigmoid_focal_loss (alpha 0.25, gamma 2) summed over every anchor and divided by the
positive count, smooth L1 on the positives only through a mask. fp32, SGD momentum 0.9 with weight
decay 1e-4 and gradient clipping at 10, batch 8 of 512 x 512, 2 steps (each its own phase); then
evaluation under no_grad and bf16 autocast at batch 4 of 768 x 768 (the deformable convolutions
run in fp32 through torchvision's autocast rule), the per-level scores sigmoid-ed and the top 1,000
per level kept with topk; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.ops import DeformConv2d, FeaturePyramidNetwork, sigmoid_focal_loss
from torchvision.ops.feature_pyramid_network import LastLevelP6P7

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16001)
if SMALL:
    B, SIDE, EVAL_B, EVAL_SIDE, CLASSES, STEPS, TOPK = 2, 128, 1, 160, 4, 2, 50
else:
    B, SIDE, EVAL_B, EVAL_SIDE, CLASSES, STEPS, TOPK = 8, 512, 4, 768, 80, 2, 1000
A = 9
device = "cuda" if torch.cuda.is_available() else "cpu"


class DCNv2Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.offset_mask = nn.Conv2d(channels, 27, 3, padding=1)
        nn.init.zeros_(self.offset_mask.weight)
        nn.init.zeros_(self.offset_mask.bias)
        self.conv = DeformConv2d(channels, channels, 3, padding=1)
        self.norm = nn.GroupNorm(32, channels)

    def forward(self, x):
        om = self.offset_mask(x)
        offset, mask = om[:, :18], om[:, 18:].sigmoid()
        return F.relu(self.norm(self.conv(x, offset, mask)))


class DeformHead(nn.Module):
    def __init__(self, channels, classes):
        super().__init__()
        self.cls_tower = nn.Sequential(*[DCNv2Block(channels) for _ in range(3)])
        self.box_tower = nn.Sequential(*[DCNv2Block(channels) for _ in range(3)])
        self.cls_logits = nn.Conv2d(channels, A * classes, 3, padding=1)
        self.bbox_pred = nn.Conv2d(channels, A * 4, 3, padding=1)
        nn.init.constant_(self.cls_logits.bias, -4.59)  # prior 0.01
        self.classes = classes

    def forward(self, feats):
        logits, deltas = [], []
        for f in feats:
            n, _, h, w = f.shape
            c = self.cls_logits(self.cls_tower(f))
            r = self.bbox_pred(self.box_tower(f))
            logits.append(
                c.view(n, A, self.classes, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, self.classes)
            )
            deltas.append(r.view(n, A, 4, h, w).permute(0, 3, 4, 1, 2).reshape(n, -1, 4))
        return torch.cat(logits, 1), torch.cat(deltas, 1), logits


class DenseDetector(nn.Module):
    def __init__(self, classes):
        super().__init__()
        trunk = torchvision.models.resnet34(weights=None)
        self.body = IntermediateLayerGetter(trunk, {"layer2": "c3", "layer3": "c4", "layer4": "c5"})
        self.fpn = FeaturePyramidNetwork([128, 256, 512], 256, extra_blocks=LastLevelP6P7(256, 256))
        self.head = DeformHead(256, classes)

    def forward(self, images):
        feats = self.fpn(self.body(images))
        return self.head(list(feats.values()))


def anchors_per_image(side):
    total = 0
    for stride in (8, 16, 32, 64, 128):
        s = -(-side // stride)
        total += s * s * A
    return total


model = DenseDetector(CLASSES).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
n_anchors = anchors_per_image(SIDE)
images = torch.randn(STEPS, B, 3, SIDE, SIDE, device=device)
positive = torch.rand(STEPS, B, n_anchors, device=device) < 0.02
gt_class = torch.randint(0, CLASSES, (STEPS, B, n_anchors), device=device)
gt_boxes = torch.randn(STEPS, B, n_anchors, 4, device=device) * 0.5
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    cls_out, box_out, _ = model(images[step])
    pos = positive[step]
    target = F.one_hot(gt_class[step], CLASSES).to(cls_out.dtype) * pos.unsqueeze(-1)
    num_pos = pos.sum().clamp(min=1)
    loss_cls = sigmoid_focal_loss(cls_out, target, alpha=0.25, gamma=2.0, reduction="sum") / num_pos
    l1 = F.smooth_l1_loss(box_out, gt_boxes[step], beta=1.0 / 9, reduction="none").sum(-1)
    loss_box = (l1 * pos).sum() / num_pos
    loss = loss_cls + loss_box
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del cls_out, box_out, loss, loss_cls, loss_box, l1, target
model.eval()
kept = 0
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(EVAL_B, 3, EVAL_SIDE, EVAL_SIDE, device=device)
    _, deltas, per_level = model(x)
    for logits in per_level:
        scores = logits.sigmoid().flatten(1)
        top, idx = scores.topk(min(TOPK, scores.shape[1]), dim=1)
        kept += int((top > 0.05).sum().item())
if device == "cuda":
    print(
        f"eval kept {kept} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
