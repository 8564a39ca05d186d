"""Table detection training with Table Transformer (DETR) when scipy is absent: a
TableTransformerForObjectDetection from `TableTransformerConfig(num_labels=2)` with an HF ResNet-50 backbone
(`backbone_config=ResNetConfig(out_features=["stage4"])`, not timm; random init). Its `labels=` loss needs
scipy's Hungarian matcher, so the script takes `logits` and `pred_boxes` and writes the loss: a greedy
class + L1 matcher by hand, cross-entropy over num_labels + 1 classes with the no-object class weighted
0.1 (eos_coefficient), L1 and GIoU (torchvision.ops). Pages are padded to a common 800 x 800 canvas and the
true extent given as `pixel_mask`.

Phases: 0 detection model and AdamW (backbone lr 1e-5, the rest 1e-4, weight decay 1e-4), fp32;
1 three fp32 steps at batch 4 (pages 800 x 608 .. 800 x 800 padded, 4 tables each), clip_grad_norm_ 0.1;
2 a structure-recognition model (6 labels, 125 queries) trained three steps at batch 2 on 1000 x 1000
table crops under bf16 autocast, 30 cells each (the detection model kept); 3 both models evaluated under
no_grad + fp16 autocast at batch 8 with DetrImageProcessor.post_process_object_detection.
Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, generalized_box_iou_loss
from transformers import (
    DetrImageProcessor,
    ResNetConfig,
    TableTransformerConfig,
    TableTransformerForObjectDetection,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3553)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B1, SIZE, WIDTHS, BOXES, B2, CROP, CELLS, B3 = 2, 128, (96, 128), 2, 1, 160, 4, 2
    BACKBONE = ResNetConfig(depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256], out_features=["stage4"])
    EXTRA = {
        "d_model": 64,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_ffn_dim": 128,
        "decoder_ffn_dim": 128,
    }
else:
    B1, SIZE, WIDTHS, BOXES, B2, CROP, CELLS, B3 = 4, 800, (608, 672, 736, 800), 4, 2, 1000, 30, 8
    BACKBONE = ResNetConfig(out_features=["stage4"])
    EXTRA = {}


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


def detr_loss(logits, boxes, targets, num_labels):
    logits, boxes = logits.float(), boxes.float()
    target_classes = torch.full(logits.shape[:2], num_labels, dtype=torch.long, device=device)
    pred_boxes, gt_boxes = [], []
    for b, t in enumerate(targets):
        with torch.no_grad():
            prob = logits[b].softmax(-1)
            cost = -prob[:, t["class_labels"]] + 5.0 * torch.cdist(boxes[b], t["boxes"], p=1)
        q, g = greedy_match(cost)
        target_classes[b, q] = t["class_labels"][g]
        pred_boxes.append(boxes[b][q])
        gt_boxes.append(t["boxes"][g])
    weight = torch.ones(num_labels + 1, device=device)
    weight[-1] = 0.1
    loss = F.cross_entropy(logits.transpose(1, 2), target_classes, weight)
    pred, gt = torch.cat(pred_boxes), torch.cat(gt_boxes)
    giou = generalized_box_iou_loss(box_convert(pred, "cxcywh", "xyxy"), box_convert(gt, "cxcywh", "xyxy"))
    return loss + 5.0 * F.l1_loss(pred, gt) + 2.0 * giou.mean()


def targets_for(n, boxes, num_labels):
    out = []
    for _ in range(n):
        centers = torch.rand(boxes, 2, device=device) * 0.6 + 0.2
        sizes = torch.rand(boxes, 2, device=device) * 0.3 + 0.05
        out.append(
            {
                "class_labels": torch.randint(0, num_labels, (boxes,), device=device),
                "boxes": torch.cat([centers, sizes], -1),
            }
        )
    return out


def build(num_labels, queries):
    config = TableTransformerConfig(
        num_labels=num_labels, num_queries=queries, backbone_config=BACKBONE.to_dict(), **EXTRA
    )
    model = TableTransformerForObjectDetection(config).to(device)
    backbone = [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad]
    ids = {id(p) for p in backbone}
    rest = [p for p in model.parameters() if id(p) not in ids and p.requires_grad]
    opt = torch.optim.AdamW(
        [{"params": backbone, "lr": 1e-5}, {"params": rest, "lr": 1e-4}], weight_decay=1e-4
    )
    return model, opt


def train(model, opt, batch, height, widths, boxes, num_labels, autocast):
    model.train()
    for step in range(3):
        pixels = torch.zeros(batch, 3, height, max(widths), device=device)
        mask = torch.zeros(batch, height, max(widths), dtype=torch.long, device=device)
        for i in range(batch):
            w = widths[i % len(widths)]
            pixels[i, :, :, :w] = torch.randn(3, height, w, device=device)
            mask[i, :, :w] = 1
        targets = targets_for(batch, boxes, num_labels)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda and autocast):
            out = model(pixel_values=pixels, pixel_mask=mask)
        loss = detr_loss(out.logits, out.pred_boxes, targets, num_labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
    del out, loss


detector, det_opt = build(2, 100)
print(f"detection parameters {sum(p.numel() for p in detector.parameters()):,}")
report("phase0 table transformer detection r50 + adamw")

train(detector, det_opt, B1, SIZE, WIDTHS, BOXES, 2, autocast=False)
report(f"phase1 three fp32 detection steps at batch {B1}, {SIZE} high, padded, pixel_mask")

structure, struct_opt = build(6, 125)
train(structure, struct_opt, B2, CROP, (CROP,), CELLS, 6, autocast=True)
report(f"phase2 structure recognition 125 queries, three bf16 autocast steps at batch {B2} x {CROP}^2")

processor = DetrImageProcessor()
for model, size, name in ((detector, SIZE, "detection"), (structure, CROP, "structure")):
    model.eval()
    with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
        out = model(pixel_values=torch.randn(B3, 3, size, size, device=device))
        dets = processor.post_process_object_detection(out, threshold=0.0, target_sizes=[(size, size)] * B3)
    print(f"{name} detections per image {dets[0]['boxes'].shape[0]}")
    del out, dets
report(f"phase3 no_grad fp16 autocast eval + post-processing at batch {B3}")
