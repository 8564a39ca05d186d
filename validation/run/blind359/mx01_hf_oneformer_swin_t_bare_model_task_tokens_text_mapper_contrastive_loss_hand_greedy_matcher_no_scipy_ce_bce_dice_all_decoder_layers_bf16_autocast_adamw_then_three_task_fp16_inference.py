"""OneFormer training and task-conditioned inference the way users write it when scipy is absent: the
universal-segmentation model builds OneFormerLoss (scipy's Hungarian matcher, `requires_backends`) in its
constructor, so the bare OneFormerModel from `OneFormerConfig(num_labels=150, is_training=True)` (Swin-T
backbone, random init, 6 deformable pixel-decoder layers, 10 task-conditioned transformer decoder layers,
150 queries, the CLIP-style text mapper of 6 layers x 256 over 77-token texts) and the set loss by hand: a
greedy matcher on a class + dice cost, cross-entropy over every query (no-object weight 0.1), sigmoid BCE
and dice on the matched masks at the model's quarter resolution for the final and every auxiliary decoder
layer, plus OneFormer's query-text contrastive loss (temperature 0.07, a learned logit scale) between the
task-guided queries and the text queries (134 texts an image, then the mapper's 16 learned context queries).
The task input is what OneFormerProcessor makes of "the task is semantic" (77 CLIP ids, as floats for the
task MLP), written here as fixed stand-in ids.

Phases: 0 model and AdamW (backbone lr 1e-5, the rest 1e-4, weight decay 0.05); 1 three steps at batch 4
on 512 x 512 images with 8 segments each under bf16 autocast, clip_grad_norm_ 0.01; 2 the text mapper
switched off as an inference config has it (`is_training` False), fp16 autocast under inference_mode, batch
2 at 512 x 683 once per task token (semantic, instance, panoptic), each with
OneFormerImageProcessor.post_process_semantic_segmentation; 3 the model cast to fp16 (`.half()`), a batch
of 1 at 1024 x 1024 per task. Seeded; no sizes depend on values."""

import math
import os
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from transformers import OneFormerConfig, OneFormerImageProcessor, OneFormerModel, SwinConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3591)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    B1, SIZE, SEGS, B2, H2, W2, S3 = 1, 128, 2, 1, 128, 160, 128
else:
    B1, SIZE, SEGS, B2, H2, W2, S3 = 4, 512, 8, 2, 512, 683, 1024
NUM_LABELS = 150


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


if SMALL:
    swin = SwinConfig(
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 2, 2, 4],
        window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = OneFormerConfig(
        backbone_config=swin,
        num_labels=NUM_LABELS,
        is_training=True,
        num_queries=24,
        text_encoder_n_ctx=8,
        hidden_dim=64,
        conv_dim=64,
        mask_dim=64,
        encoder_layers=1,
        decoder_layers=3,
        dim_feedforward=64,
        encoder_feedforward_dim=64,
        text_encoder_width=64,
        text_encoder_num_layers=1,
    )
else:
    config = OneFormerConfig(num_labels=NUM_LABELS, is_training=True)
NUM_TEXT = config.num_queries - config.text_encoder_n_ctx
CTX = config.text_encoder_context_length


def task_tokens(task, batch):
    """OneFormerProcessor's CLIP ids of f"the task is {task}", padded to task_seq_len (stand-in ids)."""
    word = {"semantic": 13771, "instance": 8856, "panoptic": 35351}[task]
    ids = [49406, 518, 2726, 533, word, 49407] + [0] * (config.task_seq_len - 6)
    return torch.tensor(ids, device=device).float().expand(batch, -1)


def text_inputs(batch):
    """Per image NUM_TEXT tokenized "a photo with a {class}" prompts, 77 ids each (EOT the largest id)."""
    ids = torch.zeros(batch, NUM_TEXT, CTX, dtype=torch.long, device=device)
    ids[..., 0] = 49406
    ids[..., 1:7] = torch.randint(300, 40000, (batch, NUM_TEXT, 6), device=device)
    ids[..., 7] = 49407
    return ids


def greedy_match(cost):
    """Greedy stand-in for linear_sum_assignment: take the cheapest (query, segment) pair, strike both."""
    cost = cost.float().cpu().clone()
    rows, cols = [], []
    for _ in range(cost.shape[1]):
        q, g = divmod(int(cost.argmin()), cost.shape[1])
        rows.append(q)
        cols.append(g)
        cost[q, :] = float("inf")
        cost[:, g] = float("inf")
    return torch.tensor(rows, device=device), torch.tensor(cols, device=device)


def dice_loss(logits, target):
    prob = logits.sigmoid().flatten(1)
    target = target.flatten(1)
    return (1 - (2 * (prob * target).sum(1) + 1) / (prob.sum(1) + target.sum(1) + 1)).mean()


def set_loss(class_logits, mask_logits, labels, masks):
    B, Q = class_logits.shape[:2]
    target_classes = torch.full((B, Q), NUM_LABELS, dtype=torch.long, device=device)
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
        target_classes[b, q] = labels[b][g]
        matched_logits.append(mask_logits[b][q])
        matched_masks.append(masks[b][g])
    weight = torch.ones(NUM_LABELS + 1, device=device)
    weight[-1] = 0.1
    loss_ce = F.cross_entropy(class_logits.float().transpose(1, 2), target_classes, weight=weight)
    pred = torch.cat(matched_logits).float()
    gt = torch.cat(matched_masks)
    return 2.0 * loss_ce + 5.0 * F.binary_cross_entropy_with_logits(pred, gt) + 5.0 * dice_loss(pred, gt)


def contrastive_loss(queries, text_queries, logit_scale):
    image = F.normalize(queries.float().flatten(1), dim=-1)
    text = F.normalize(text_queries.float().flatten(1), dim=-1)
    logits_per_text = text @ image.t() * logit_scale.exp().clamp(max=100)
    target = torch.arange(len(logits_per_text), device=device)
    return F.cross_entropy(logits_per_text.t(), target) + F.cross_entropy(logits_per_text, target)


model = OneFormerModel(config).to(device)
logit_scale = torch.nn.Parameter(torch.tensor(math.log(1 / 0.07), device=device))
backbone = [p for n, p in model.named_parameters() if n.startswith("pixel_level_module.encoder.")]
backbone_ids = {id(p) for p in backbone}
rest = [p for p in model.parameters() if id(p) not in backbone_ids] + [logit_scale]
opt = torch.optim.AdamW([{"params": backbone, "lr": 1e-5}, {"params": rest, "lr": 1e-4}], weight_decay=0.05)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"backbone {sum(p.numel() for p in backbone):,}"
)
report("phase0 oneformer swin-t + text mapper + adamw")

model.train()
quarter = SIZE // 4
for step in range(3):
    pixels = torch.randn(B1, 3, SIZE, SIZE, device=device)
    labels = torch.randint(0, NUM_LABELS, (B1, SEGS), device=device)
    masks = (torch.rand(B1, SEGS, quarter, quarter, device=device) > 0.7).float()
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=pixels, task_inputs=task_tokens("semantic", B1), text_inputs=text_inputs(B1))
    layers = [
        (aux["class_queries_logits"], aux["masks_queries_logits"])
        for aux in out.transformer_decoder_auxiliary_predictions
    ]
    layers.append((out.transformer_decoder_class_predictions, out.transformer_decoder_mask_predictions))
    loss = sum(set_loss(c, m, labels, masks) for c, m in layers)
    loss = loss + 0.5 * contrastive_loss(
        out.transformer_decoder_contrastive_queries, out.text_queries, logit_scale
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    opt.step()
    print(f"train step {step} loss {loss.item():.4f} decoder layers with a loss {len(layers)}")
del out, loss, layers
report(f"phase1 three hand-matched set-loss + contrastive steps at batch {B1} x {SIZE}^2, bf16 autocast")

processor = OneFormerImageProcessor()
model.eval()
model.is_training = False
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
    for task in ("semantic", "instance", "panoptic"):
        out = model(pixel_values=torch.randn(B2, 3, H2, W2, device=device), task_inputs=task_tokens(task, B2))
        pred = SimpleNamespace(
            class_queries_logits=out.transformer_decoder_class_predictions,
            masks_queries_logits=out.transformer_decoder_mask_predictions,
        )
        seg = processor.post_process_semantic_segmentation(pred, target_sizes=[(H2, W2)] * B2)
        print(
            f"{task}: masks {tuple(pred.masks_queries_logits.shape)} maps {len(seg)} x {tuple(seg[0].shape)}"
        )
        del out, pred, seg
report(f"phase2 inference_mode fp16 autocast, batch {B2} at {H2}x{W2} per task token")

model.half()
if not cuda:
    model.float()
with torch.inference_mode():
    for task in ("semantic", "instance", "panoptic"):
        pixels = torch.randn(1, 3, S3, S3, device=device, dtype=torch.float16 if cuda else torch.float32)
        out = model(pixel_values=pixels, task_inputs=task_tokens(task, 1).to(pixels.dtype))
        pred = SimpleNamespace(
            class_queries_logits=out.transformer_decoder_class_predictions,
            masks_queries_logits=out.transformer_decoder_mask_predictions,
        )
        seg = processor.post_process_semantic_segmentation(pred, target_sizes=[(S3, S3)])
        print(f"fp16 {task}: map {tuple(seg[0].shape)}")
        del out, pred, seg
report(f"phase3 fp16 .half() inference_mode at 1 x {S3}^2 per task token")
