"""RF-DETR detection training the way users write it when scipy is absent (the model's RfDetr loss builds
scipy's Hungarian matcher, so the model is called without `labels=` and the loss is written by hand): an
RfDetrForObjectDetection from `RfDetrConfig(num_labels=80)` (the default RF-DETR base layout: a DINOv2-S
backbone of 384 x 12 with windowed attention (4 x 4 windows on 8 of its blocks), patch 14, a C2f projector to
one 256-wide level, 3 deformable decoder layers, 300 queries, two-stage proposals, random init). In training
it runs its 13 Group-DETR query groups (3,900 queries); the script matches each group to the targets on its
own, greedily (class + L1 cost), with sigmoid focal loss on the class logits, L1 and GIoU (torchvision.ops)
on the matched boxes, for the final decoder layer. An EMA of the weights (torch.optim.swa_utils.AveragedModel
with get_ema_multi_avg_fn(0.993)) as RF-DETR's trainer keeps one.

Phases: 0 model, EMA copy and AdamW (backbone lr 1.5e-4 x 0.8 decay folded to one group, the rest 1e-4,
weight decay 1e-4); 1 three steps at batch 8 on 560 x 560 images with 7 boxes each under bf16 autocast,
clip_grad_norm_ 0.1, EMA update after each step; 2 the EMA model in eval (one query group), fp32 no_grad, two
batches of 8 at 560 x 560 with RfDetrImageProcessor.post_process_object_detection (threshold 0, top 100);
3 the EMA model cast to fp16 (`.half()`), inference_mode over two batches of 4 at 728 x 728 with the same
post-processing. Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torchvision.ops import box_convert, generalized_box_iou_loss, sigmoid_focal_loss
from transformers import RfDetrConfig, RfDetrForObjectDetection, RfDetrImageProcessor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3594)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
NUM_LABELS = 80
if SMALL:
    config = RfDetrConfig(num_labels=NUM_LABELS, num_queries=20, group_detr=3, decoder_layers=2)
    config.backbone_config.num_hidden_layers = 4
    config.backbone_config.window_block_indexes = [0, 2]
    config.backbone_config.out_indices = [1, 2, 3, 4]
    config.backbone_config.out_features = ["stage1", "stage2", "stage3", "stage4"]
    B1, S1, B2, B3, S3, BOXES = 1, 224, 2, 1, 280, 3
else:
    config = RfDetrConfig(num_labels=NUM_LABELS)
    B1, S1, B2, B3, S3, BOXES = 8, 560, 8, 4, 728, 7
GROUPS, QUERIES = config.group_detr, config.num_queries


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


def group_detr_loss(logits, boxes, targets):
    """logits (B, GROUPS * QUERIES, C), boxes (B, GROUPS * QUERIES, 4): each group matched on its own."""
    logits, boxes = logits.float(), boxes.float()
    cls_target = torch.zeros_like(logits)
    pred_boxes, gt_boxes = [], []
    for b, t in enumerate(targets):
        with torch.no_grad():
            cost = -2.0 * logits[b].sigmoid()[:, t["class_labels"]] + 5.0 * torch.cdist(
                boxes[b], t["boxes"], p=1
            )
        for g in range(logits.shape[1] // QUERIES):
            q, k = greedy_match(cost[g * QUERIES : (g + 1) * QUERIES])
            q = q + g * QUERIES
            cls_target[b, q, t["class_labels"][k]] = 1.0
            pred_boxes.append(boxes[b][q])
            gt_boxes.append(t["boxes"][k])
    num = sum(len(t["class_labels"]) for t in targets) * (logits.shape[1] // QUERIES)
    loss = sigmoid_focal_loss(logits, cls_target, alpha=0.25, reduction="sum") / num
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


model = RfDetrForObjectDetection(config).to(device)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.993), use_buffers=True)
backbone = [p for n, p in model.named_parameters() if ".backbone." in n and p.requires_grad]
backbone_ids = {id(p) for p in backbone}
rest = [p for p in model.parameters() if id(p) not in backbone_ids and p.requires_grad]
opt = torch.optim.AdamW([{"params": backbone, "lr": 1.2e-4}, {"params": rest, "lr": 1e-4}], weight_decay=1e-4)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"backbone {sum(p.numel() for p in backbone):,}, rest {sum(p.numel() for p in rest):,}"
)
report("phase0 rf-detr base + ema copy + adamw")

model.train()
for step in range(3):
    pixels = torch.rand(B1, 3, S1, S1, device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=pixels)
    loss = group_detr_loss(out.logits, out.pred_boxes, targets_for(B1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    ema.update_parameters(model)
    print(f"bf16 step {step} loss {loss.item():.4f} queries {out.logits.shape[1]}")
del out, loss
report(f"phase1 three bf16 autocast group-detr steps at batch {B1} x {S1}^2 + ema")

processor = RfDetrImageProcessor()
net = ema.module
net.eval()
with torch.no_grad():
    for _ in range(2):
        out = net(pixel_values=torch.rand(B2, 3, S1, S1, device=device))
        dets = processor.post_process_object_detection(
            out, threshold=0.0, target_sizes=[(S1, S1)] * B2, top_k=100
        )
        print(f"eval queries {out.logits.shape[1]} detections per image {dets[0]['boxes'].shape[0]}")
        del out, dets
report(f"phase2 ema fp32 no_grad eval + post-processing at batch {B2} x {S1}^2")

net.half()
dtype = torch.float16 if cuda else torch.float32
if not cuda:
    net.float()
with torch.inference_mode():
    for _ in range(2):
        out = net(pixel_values=torch.rand(B3, 3, S3, S3, device=device, dtype=dtype))
        dets = processor.post_process_object_detection(
            out, threshold=0.0, target_sizes=[(S3, S3)] * B3, top_k=100
        )
        print(f"fp16 detections per image {dets[0]['boxes'].shape[0]}")
        del out, dets
report(f"phase3 ema fp16 .half() inference_mode at batch {B3} x {S3}^2")
