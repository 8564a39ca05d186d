"""Conditional DETR detection training when scipy is absent (ConditionalDetrForObjectDetection's loss builds
scipy's Hungarian matcher, so the user calls the model without `labels=` and writes the loss): a
ConditionalDetrForObjectDetection from `ConditionalDetrConfig(num_labels=91)` (timm ResNet-50 backbone,
random init, 6 + 6 layers of 256 with conditional cross-attention, 300 queries); a greedy class + L1 matcher
by hand on the last decoder layer, sigmoid focal loss (alpha 0.25) on the class logits, L1 and GIoU
(torchvision.ops) on the matched boxes, as the model's own loss weighs them (2 / 5 / 2).

Phases: 0 model and AdamW (backbone lr 1e-5, the rest 1e-4, weight decay 1e-4); 1 three fp32 steps at batch
4 on 640 x 640 images with 6 boxes each, clip_grad_norm_ 0.1; 2 three bf16-autocast steps at batch 8 on 800
x 800 with a `pixel_mask` as the processor pads (every other image 800 x 600, its right quarter masked);
3 eval under no_grad and fp16 autocast at batch 8 on 800 x 1333 with
ConditionalDetrImageProcessor.post_process_object_detection (threshold 0: its top 100 per image, all
kept while every sigmoid stays above 0).
Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, generalized_box_iou_loss, sigmoid_focal_loss
from transformers import (
    ConditionalDetrConfig,
    ConditionalDetrForObjectDetection,
    ConditionalDetrImageProcessor,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3574)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B1, S1, B2, S2, B3, H3, W3, BOXES = 1, 128, 2, 160, 2, 128, 192, 2
else:
    B1, S1, B2, S2, B3, H3, W3, BOXES = 4, 640, 8, 800, 8, 800, 1333, 6
NUM_LABELS = 91


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def greedy_match(cost):
    cost = cost.float().cpu().clone()
    rows, cols = [], []
    for _ in range(cost.shape[1]):
        q, g = divmod(int(cost.argmin()), cost.shape[1])
        rows.append(q)
        cols.append(g)
        cost[q, :] = float("inf")
        cost[:, g] = float("inf")
    return torch.tensor(rows, device=device), torch.tensor(cols, device=device)


def detection_loss(logits, boxes, targets):
    logits, boxes = logits.float(), boxes.float()
    cls_target = torch.zeros_like(logits)
    pred_boxes, gt_boxes = [], []
    for b, t in enumerate(targets):
        with torch.no_grad():
            cost = -2.0 * logits[b].sigmoid()[:, t["class_labels"]] + 5.0 * torch.cdist(
                boxes[b], t["boxes"], p=1
            )
        q, g = greedy_match(cost)
        cls_target[b, q, t["class_labels"][g]] = 1.0
        pred_boxes.append(boxes[b][q])
        gt_boxes.append(t["boxes"][g])
    num = sum(len(t["class_labels"]) for t in targets)
    loss = 2.0 * sigmoid_focal_loss(logits, cls_target, alpha=0.25, reduction="sum") / num
    pred, gt = torch.cat(pred_boxes), torch.cat(gt_boxes)
    giou = generalized_box_iou_loss(box_convert(pred, "cxcywh", "xyxy"), box_convert(gt, "cxcywh", "xyxy"))
    return loss + 5.0 * F.l1_loss(pred, gt) + 2.0 * giou.mean()


def targets_for(n):
    out = []
    for _ in range(n):
        centers = torch.rand(BOXES, 2, device=device) * 0.6 + 0.2
        sizes = torch.rand(BOXES, 2, device=device) * 0.3 + 0.05
        out.append(
            {
                "class_labels": torch.randint(0, NUM_LABELS, (BOXES,), device=device),
                "boxes": torch.cat([centers, sizes], -1),
            }
        )
    return out


model = ConditionalDetrForObjectDetection(ConditionalDetrConfig(num_labels=NUM_LABELS)).to(device)
backbone = [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad]
backbone_ids = {id(p) for p in backbone}
rest = [p for p in model.parameters() if id(p) not in backbone_ids and p.requires_grad]
opt = torch.optim.AdamW([{"params": backbone, "lr": 1e-5}, {"params": rest, "lr": 1e-4}], weight_decay=1e-4)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"backbone {sum(p.numel() for p in backbone):,}, rest {sum(p.numel() for p in rest):,}"
)
report("phase0 conditional detr r50 + adamw")

model.train()
for step in range(3):
    pixels = torch.rand(B1, 3, S1, S1, device=device)
    out = model(pixel_values=pixels)
    loss = detection_loss(out.logits, out.pred_boxes, targets_for(B1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    print(f"fp32 step {step} loss {loss.item():.4f}")
del out, loss
report(f"phase1 three fp32 steps at batch {B1} x {S1}^2")

mask = torch.ones(B2, S2, S2, dtype=torch.long, device=device)
mask[1::2, :, S2 * 3 // 4 :] = 0
for step in range(3):
    pixels = torch.rand(B2, 3, S2, S2, device=device) * mask[:, None]
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=pixels, pixel_mask=mask)
    loss = detection_loss(out.logits, out.pred_boxes, targets_for(B2))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    print(f"bf16 step {step} loss {loss.item():.4f}")
del out, loss
report(f"phase2 three bf16 autocast steps at batch {B2} x {S2}^2 with a padded pixel_mask")

processor = ConditionalDetrImageProcessor()
model.eval()
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
    for _ in range(2):
        out = model(pixel_values=torch.rand(B3, 3, H3, W3, device=device))
        dets = processor.post_process_object_detection(out, threshold=0.0, target_sizes=[(H3, W3)] * B3)
        print(f"detections per image {dets[0]['boxes'].shape[0]}")
        del out, dets
report(f"phase3 no_grad fp16 autocast eval + post-processing at batch {B3} x {H3}x{W3}")
