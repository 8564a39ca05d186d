"""HF Deformable DETR built from its config (a ResNet-50 backbone from ResNetConfig giving stages 2-4,
4 feature levels, 6 + 6 layers of multi-scale deformable attention, 300 queries, iterative box
refinement), trained in fp32 with a loss written by hand: a greedy matcher over the cost matrix
(focal class cost, L1 and GIoU of the boxes) built with torch ops, sigmoid focal loss on every
query, L1 and GIoU on the matched boxes, auxiliary losses from every decoder layer; AdamW with the
backbone at lr 1e-5 in its own group, gradient clipping at 0.1; batch 4 at 640 x 800, 3 steps; then
detection under no_grad on a batch of 8 with top-100 post-processing; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import DeformableDetrConfig, DeformableDetrForObjectDetection, ResNetConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12201)
B, H, W, N_OBJ = (2, 128, 160, 5) if SMALL else (4, 640, 800, 12)
NUM_CLASSES = 91
device = "cuda" if torch.cuda.is_available() else "cpu"

backbone = ResNetConfig(
    depths=[1, 1, 1, 1] if SMALL else [3, 4, 6, 3],
    hidden_sizes=[256, 512, 1024, 2048],
    out_features=["stage2", "stage3", "stage4"],
)
config = DeformableDetrConfig(
    backbone_config=backbone,
    use_timm_backbone=False,
    num_labels=NUM_CLASSES,
    with_box_refine=True,
    encoder_layers=2 if SMALL else 6,
    decoder_layers=2 if SMALL else 6,
    num_queries=100 if SMALL else 300,
)
model = DeformableDetrForObjectDetection(config).to(device)


def box_cxcywh_to_xyxy(b):
    cx, cy, w, h = b.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], -1)


def generalized_iou(a, b):
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = torch.max(a[:, None, :2], b[None, :, :2])
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    union = area_a[:, None] + area_b[None] - inter
    iou = inter / union
    lt2 = torch.min(a[:, None, :2], b[None, :, :2])
    rb2 = torch.max(a[:, None, 2:], b[None, :, 2:])
    area_c = (rb2 - lt2).clamp(min=0).prod(-1)
    return iou - (area_c - union) / area_c


@torch.no_grad()
def greedy_match(logits, boxes, tgt_cls, tgt_box):
    prob = logits.sigmoid()
    neg = 0.75 * prob**2 * -(1 - prob + 1e-8).log()
    pos = 0.25 * (1 - prob) ** 2 * -(prob + 1e-8).log()
    cost = 2 * (pos[:, tgt_cls] - neg[:, tgt_cls])
    cost = cost + 5 * torch.cdist(boxes, tgt_box, p=1)
    cost = cost - 2 * generalized_iou(box_cxcywh_to_xyxy(boxes), box_cxcywh_to_xyxy(tgt_box))
    rows = []
    for j in range(tgt_box.shape[0]):
        i = cost[:, j].argmin()
        rows.append(i)
        cost[i] = float("inf")
    return torch.stack(rows)


def set_loss(logits, boxes, targets):
    loss = logits.new_zeros(())
    for b, (tgt_cls, tgt_box) in enumerate(targets):
        q = greedy_match(logits[b], boxes[b], tgt_cls, tgt_box)
        onehot = torch.zeros_like(logits[b])
        onehot[q, tgt_cls] = 1.0
        loss = loss + 2 * torchvision_free_focal(logits[b], onehot) / len(tgt_cls)
        pb = boxes[b][q]
        loss = loss + 5 * F.l1_loss(pb, tgt_box, reduction="sum") / len(tgt_cls)
        giou = generalized_iou(box_cxcywh_to_xyxy(pb), box_cxcywh_to_xyxy(tgt_box)).diagonal()
        loss = loss + 2 * (1 - giou).sum() / len(tgt_cls)
    return loss / len(targets)


def torchvision_free_focal(logits, targets, alpha=0.25, gamma=2.0):
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return loss.sum()


backbone_params = [p for n, p in model.named_parameters() if "backbone" in n]
other_params = [p for n, p in model.named_parameters() if "backbone" not in n]
opt = torch.optim.AdamW(
    [{"params": other_params}, {"params": backbone_params, "lr": 1e-5}], lr=2e-4, weight_decay=1e-4
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    pixel_values = torch.randn(B, 3, H, W, device=device)
    pixel_mask = torch.ones(B, H, W, dtype=torch.long, device=device)
    targets = [
        (
            torch.randint(0, NUM_CLASSES, (N_OBJ,), device=device),
            torch.cat(
                [
                    torch.rand(N_OBJ, 2, device=device) * 0.6 + 0.2,
                    torch.rand(N_OBJ, 2, device=device) * 0.3 + 0.05,
                ],
                -1,
            ),
        )
        for _ in range(B)
    ]
    out = model(pixel_values=pixel_values, pixel_mask=pixel_mask, output_hidden_states=False)
    loss = set_loss(out.logits, out.pred_boxes, targets)
    inter = out.intermediate_hidden_states
    for layer in range(inter.shape[1] - 1):
        ref = out.init_reference_points if layer == 0 else out.intermediate_reference_points[:, layer - 1]
        ref = torch.logit(ref.clamp(1e-5, 1 - 1e-5))
        logits_l = model.class_embed[layer](inter[:, layer])
        delta = model.bbox_embed[layer](inter[:, layer])
        if ref.shape[-1] == 4:
            boxes_l = (delta + ref).sigmoid()
        else:
            boxes_l = torch.cat([delta[..., :2] + ref, delta[..., 2:]], -1).sigmoid()
        loss = loss + set_loss(logits_l, boxes_l, targets)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pixel_values, pixel_mask, targets, out, loss, inter, ref, delta, logits_l, boxes_l

model.eval()
with torch.no_grad():
    pixel_values = torch.randn(2 * B, 3, H, W, device=device)
    out = model(pixel_values=pixel_values)
    prob = out.logits.sigmoid()
    scores, idx = prob.flatten(1).topk(100, dim=1)
    labels = idx % NUM_CLASSES
    boxes = torch.gather(
        box_cxcywh_to_xyxy(out.pred_boxes), 1, (idx // NUM_CLASSES).unsqueeze(-1).expand(-1, -1, 4)
    )
    boxes = boxes * torch.tensor([W, H, W, H], device=device)
    keep = scores > 0.3
    n_kept = int(keep.sum())
if device == "cuda":
    print(
        f"detect kept {n_kept} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
