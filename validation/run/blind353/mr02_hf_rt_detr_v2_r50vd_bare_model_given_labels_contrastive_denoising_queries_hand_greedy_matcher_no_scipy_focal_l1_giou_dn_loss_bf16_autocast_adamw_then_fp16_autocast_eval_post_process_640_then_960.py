"""RT-DETR v2 detection training when scipy is absent (RTDetrV2ForObjectDetection's loss builds scipy's
Hungarian matcher, so users call its bare `.model` and write the loss): an RTDetrV2ForObjectDetection from
`RTDetrV2Config(num_labels=80)` (ResNet-50-vd backbone config, random init); in training mode the model is
given `labels=` so it builds its contrastive denoising groups (num_denoising 100), the decoder's last
layer logits and boxes are split into the denoising and matching parts with
`denoising_meta_values["dn_num_split"]`, the matching part gets a greedy class + L1 matcher by hand and the
denoising part uses its known positive indices; sigmoid focal loss, L1 and GIoU (torchvision.ops).

Phases: 0 model and AdamW (backbone lr 1e-5, the rest 1e-4, weight decay 1e-4); 1 three steps at batch 4
on 640 x 640 images with 6 boxes each, bf16 autocast, clip_grad_norm_ 0.1; 2 eval under no_grad and fp16
autocast at batch 8 with RTDetrImageProcessor.post_process_object_detection; 3 the same at batch 4 on
960 x 960 images (the model's anchors regenerated for the new size). Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, generalized_box_iou_loss, sigmoid_focal_loss
from transformers import RTDetrImageProcessor, RTDetrV2Config, RTDetrV2ForObjectDetection

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3532)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B1, SIZE, BOXES, B2, B3, BIG = 1, 160, 2, 2, 1, 224
else:
    B1, SIZE, BOXES, B2, B3, BIG = 4, 640, 6, 8, 4, 960
NUM_LABELS = 80


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


def box_losses(pred, gt):
    l1 = F.l1_loss(pred, gt)
    giou = generalized_box_iou_loss(
        box_convert(pred, "cxcywh", "xyxy"), box_convert(gt, "cxcywh", "xyxy"), reduction="mean"
    )
    return 5.0 * l1 + 2.0 * giou


def detection_loss(logits, boxes, targets, meta):
    dn, queries = meta["dn_num_split"]
    dn_logits, logits = logits.float().split([dn, queries], dim=1)
    dn_boxes, boxes = boxes.float().split([dn, queries], dim=1)
    cls_target = torch.zeros_like(logits)
    pred_boxes, gt_boxes = [], []
    dn_target = torch.zeros_like(dn_logits)
    dn_pred, dn_gt = [], []
    for b, t in enumerate(targets):
        with torch.no_grad():
            cost = -logits[b].sigmoid()[:, t["class_labels"]] + torch.cdist(boxes[b], t["boxes"], p=1)
        q, g = greedy_match(cost)
        cls_target[b, q, t["class_labels"][g]] = 1.0
        pred_boxes.append(boxes[b][q])
        gt_boxes.append(t["boxes"][g])
        pos = meta["dn_positive_idx"][b]
        gt_of_pos = torch.arange(pos.numel(), device=pos.device) % len(t["class_labels"])
        dn_target[b, pos, t["class_labels"][gt_of_pos]] = 1.0
        dn_pred.append(dn_boxes[b][pos])
        dn_gt.append(t["boxes"][gt_of_pos])
    num = sum(len(t["class_labels"]) for t in targets)
    loss = sigmoid_focal_loss(logits, cls_target, reduction="sum") / num
    loss = loss + box_losses(torch.cat(pred_boxes), torch.cat(gt_boxes))
    loss = loss + sigmoid_focal_loss(dn_logits, dn_target, reduction="sum") / (num * meta["dn_num_group"])
    return loss + box_losses(torch.cat(dn_pred), torch.cat(dn_gt))


config = RTDetrV2Config(num_labels=NUM_LABELS)
model = RTDetrV2ForObjectDetection(config).to(device)
backbone = [p for n, p in model.named_parameters() if n.startswith("model.backbone") and p.requires_grad]
backbone_ids = {id(p) for p in backbone}
rest = [p for p in model.parameters() if id(p) not in backbone_ids and p.requires_grad]
opt = torch.optim.AdamW([{"params": backbone, "lr": 1e-5}, {"params": rest, "lr": 1e-4}], weight_decay=1e-4)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"backbone {sum(p.numel() for p in backbone):,}, rest {sum(p.numel() for p in rest):,}"
)
report("phase0 rt-detr v2 r50vd + adamw")


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


model.train()
for step in range(3):
    pixels = torch.rand(B1, 3, SIZE, SIZE, device=device)
    targets = targets_for(B1)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model.model(pixel_values=pixels, labels=targets)
    loss = detection_loss(
        out.intermediate_logits[:, -1],
        out.intermediate_reference_points[:, -1],
        targets,
        out.denoising_meta_values,
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    print(f"train step {step} loss {loss.item():.4f} queries {out.intermediate_logits.shape[2]}")
del out, loss
report(f"phase1 three denoising-query training steps at batch {B1} x {SIZE}^2, bf16 autocast")

processor = RTDetrImageProcessor()
model.eval()
for batch, size, tag in ((B2, SIZE, "phase2"), (B3, BIG, "phase3")):
    with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
        for _ in range(2):
            out = model(pixel_values=torch.rand(batch, 3, size, size, device=device))
            dets = processor.post_process_object_detection(
                out, threshold=0.0, target_sizes=[(size, size)] * batch
            )
            print(f"{tag} detections per image {dets[0]['boxes'].shape[0]}")
            del out, dets
    report(f"{tag} no_grad fp16 autocast eval + post-processing at batch {batch} x {size}^2")
