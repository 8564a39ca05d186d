"""Panoptic-style Mask2Former training the way users write it when scipy is not installed: the model's
Hungarian matcher calls scipy's linear_sum_assignment, and Mask2FormerForUniversalSegmentation cannot even be
built without scipy (its Mask2FormerLoss calls requires_backends), so a Mask2FormerModel from
`Mask2FormerConfig(num_labels=133)` with a Swin-S backbone config (random init) and its own nn.Linear class
head over every decoder layer's intermediate state (as the universal-segmentation model does, hidden states
on); a greedy matcher by hand on a class + dice cost matrix, and the set loss by hand at quarter
resolution: cross-entropy over every query (no-object weight 0.1), sigmoid BCE and dice on the matched
masks, for the final and every auxiliary decoder layer's predictions.

Phases: 0 model and AdamW (backbone lr 1e-5, the rest 1e-4, weight decay 0.05); 1 three steps at batch 4
on 512 x 512 images with 8 segments each, bf16 autocast, clip_grad_norm_ 0.01 as in the paper's configs;
2 eval under inference_mode at batch 4 and Mask2FormerImageProcessor.post_process_semantic_segmentation
(given a namespace with the last layer's class and mask logits) to 512 x 512; 3 the model cast to fp16
(`.half()`), inference_mode at batch 2 on 768 x 1024 images with semantic post-processing to that size.
Seeded; no sizes depend on values."""

import os
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from transformers import Mask2FormerConfig, Mask2FormerImageProcessor, Mask2FormerModel, SwinConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3531)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B1, SIZE, SEGS, B3, H3, W3 = 1, 128, 2, 1, 128, 192
else:
    B1, SIZE, SEGS, B3, H3, W3 = 4, 512, 8, 2, 768, 1024
NUM_LABELS = 133


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
    """Greedy stand-in for linear_sum_assignment: take the cheapest (query, segment) pair, strike both."""
    cost = cost.float().cpu().clone()
    rows, cols = [], []
    for _ in range(cost.shape[1]):
        flat = int(cost.argmin())
        q, g = divmod(flat, cost.shape[1])
        rows.append(q)
        cols.append(g)
        cost[q, :] = float("inf")
        cost[:, g] = float("inf")
    return torch.tensor(rows), torch.tensor(cols)


def dice_loss(logits, target):
    prob = logits.sigmoid().flatten(1)
    target = target.flatten(1)
    return (1 - (2 * (prob * target).sum(1) + 1) / (prob.sum(1) + target.sum(1) + 1)).mean()


def set_loss(class_logits, mask_logits, labels, masks):
    """class_logits (B, Q, C+1), mask_logits (B, Q, h, w), labels (B, G), masks (B, G, h, w)."""
    B, Q = class_logits.shape[:2]
    target_classes = torch.full((B, Q), NUM_LABELS, dtype=torch.long, device=class_logits.device)
    matched_logits, matched_masks = [], []
    with torch.no_grad():
        prob = class_logits.float().softmax(-1)
    for b in range(B):
        with torch.no_grad():
            m = mask_logits[b].float().sigmoid().flatten(1)
            t = masks[b].flatten(1)
            dice = 1 - (2 * m @ t.T + 1) / (m.sum(1, keepdim=True) + t.sum(1)[None] + 1)
            cost = -prob[b][:, labels[b]] + dice
        q, g = greedy_match(cost)
        q, g = q.to(class_logits.device), g.to(class_logits.device)
        target_classes[b, q] = labels[b][g]
        matched_logits.append(mask_logits[b][q])
        matched_masks.append(masks[b][g])
    weight = torch.ones(NUM_LABELS + 1, device=class_logits.device)
    weight[-1] = 0.1
    loss_ce = F.cross_entropy(class_logits.float().transpose(1, 2), target_classes, weight=weight)
    pred = torch.cat(matched_logits).float()
    gt = torch.cat(matched_masks)
    return 2.0 * loss_ce + 5.0 * F.binary_cross_entropy_with_logits(pred, gt) + 5.0 * dice_loss(pred, gt)


if SMALL:
    swin = SwinConfig(
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 2, 2, 4],
        window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = Mask2FormerConfig(
        backbone_config=swin,
        num_labels=NUM_LABELS,
        num_queries=8,
        hidden_dim=32,
        mask_feature_size=32,
        feature_size=32,
        encoder_layers=1,
        decoder_layers=2,
        dim_feedforward=64,
        num_attention_heads=4,
        encoder_feedforward_dim=64,
    )
else:
    swin = SwinConfig(
        embed_dim=96,
        depths=[2, 2, 18, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = Mask2FormerConfig(backbone_config=swin, num_labels=NUM_LABELS)


class Mask2FormerWithHead(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = Mask2FormerModel(config)
        self.class_predictor = torch.nn.Linear(config.hidden_dim, config.num_labels + 1)

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values, output_hidden_states=True)
        classes = [
            self.class_predictor(s.transpose(0, 1)) for s in out.transformer_decoder_intermediate_states
        ]
        return list(zip(classes, out.masks_queries_logits, strict=True))


model = Mask2FormerWithHead(config).to(device)
backbone = [p for n, p in model.named_parameters() if "pixel_level_module.encoder." in n]
backbone_ids = {id(p) for p in backbone}
rest = [p for p in model.parameters() if id(p) not in backbone_ids]
opt = torch.optim.AdamW([{"params": backbone, "lr": 1e-5}, {"params": rest, "lr": 1e-4}], weight_decay=0.05)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"backbone {sum(p.numel() for p in backbone):,}"
)
report("phase0 mask2former swin + adamw")

model.train()
quarter = SIZE // 4
for step in range(3):
    pixels = torch.randn(B1, 3, SIZE, SIZE, device=device)
    labels = torch.randint(0, NUM_LABELS, (B1, SEGS), device=device)
    masks = (torch.rand(B1, SEGS, quarter, quarter, device=device) > 0.7).float()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixels)
    loss = sum(set_loss(classes, masks_logits, labels, masks) for classes, masks_logits in out)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    opt.step()
    print(f"train step {step} loss {loss.item():.4f} layers with a loss {len(out)}")
del out, loss
report(f"phase1 three hand-matched set-loss steps at batch {B1} x {SIZE}^2, bf16 autocast")

processor = Mask2FormerImageProcessor()
model.eval()
with torch.inference_mode():
    for _ in range(2):
        classes, masks_logits = model(torch.randn(B1, 3, SIZE, SIZE, device=device))[-1]
        out = SimpleNamespace(class_queries_logits=classes, masks_queries_logits=masks_logits)
        seg = processor.post_process_semantic_segmentation(out, target_sizes=[(SIZE, SIZE)] * B1)
        print(f"semantic maps {len(seg)} x {tuple(seg[0].shape)}, classes in first {seg[0].unique().numel()}")
        del out, seg, classes, masks_logits
report(f"phase2 inference_mode + semantic post-processing at batch {B1}")

model.half()
with torch.inference_mode():
    for _ in range(2):
        pixels = torch.randn(B3, 3, H3, W3, device=device, dtype=torch.float16 if cuda else torch.float32)
        if not cuda:
            model.float()
        classes, masks_logits = model(pixels)[-1]
        out = SimpleNamespace(class_queries_logits=classes, masks_queries_logits=masks_logits)
        seg = processor.post_process_semantic_segmentation(out, target_sizes=[(H3, W3)] * B3)
        print(f"fp16 semantic maps {len(seg)} x {tuple(seg[0].shape)}")
        del out, seg, classes, masks_logits
report(f"phase3 fp16 .half() inference_mode at batch {B3} x {H3}x{W3}")
