"""Open-vocabulary detection with Grounding DINO as the Hugging Face examples and fine-tuning notebooks do,
weights random: a GroundingDinoForObjectDetection from `GroundingDinoConfig()` (Swin-T backbone at out
indices 2-4, BERT-base text encoder, 6 + 6 deformable encoder / decoder layers with text-image fusion,
two-stage with 900 queries, logits over the 256 text positions). Prompts are written as the processor's
tokens would be: `[CLS] name . name . ... [SEP]` with one random word id per category name and the period
(id 1012), so the model's own special-token masks (`[CLS]`, `[SEP]`, `.`) split the categories. The HF
loss builds scipy's Hungarian matcher, which the machine lacks, so the fine-tune writes the loss by hand: a
greedy matcher on the last decoder layer (cost: minus the mean sigmoid over a category's token + 5 x L1),
sigmoid focal loss over the prompt's token positions, L1 and GIoU (torchvision.ops).

Phases: 0 the model and AdamW (BERT frozen as the GLIP / Grounding DINO recipes do; backbone lr 1e-5, the
rest 1e-4); 1 `inference_mode` under fp16 autocast, two batches of 2 images at 800 x 1333 with a prompt of 6
categories, the top 100 queries by best token score kept with their boxes; 2 three fine-tune steps at
batch 4 on 640 x 640 images with 5 boxes each from 8 categories, bf16 autocast, clip_grad_norm_ 0.1; 3 eval
in fp32 under no_grad, batch 2 at 800 x 800 with a prompt of 40 categories (82 tokens). Seeded; no sizes
depend on values (the special-token masks are built from the prompt's ids)."""

import os

import torch
import torch.nn.functional as F
from torchvision.ops import box_convert, generalized_box_iou_loss, sigmoid_focal_loss
from transformers import GroundingDinoConfig, GroundingDinoForObjectDetection

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3573)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = GroundingDinoConfig(
        backbone_config=dict(
            model_type="swin",
            embed_dim=32,
            depths=[1, 1, 1, 1],
            num_heads=[1, 2, 2, 4],
            out_indices=[2, 3, 4],
        ),
        text_config=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128),
        num_queries=30,
        encoder_layers=1,
        decoder_layers=2,
        d_model=64,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
    )
    H1, W1, B1, B2, S2, S3, B3, LONG = 128, 160, 1, 2, 128, 128, 1, 5
else:
    config = GroundingDinoConfig()
    H1, W1, B1, B2, S2, S3, B3, LONG = 800, 1333, 2, 4, 640, 800, 2, 40
CLS, SEP, PERIOD = 101, 102, 1012
BOXES, TRAIN_CATEGORIES, TOP = 5, 8, 10 if SMALL else 100


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


def prompt(categories, batch):
    words = torch.randint(2000, 29000, (categories,))
    ids = [CLS]
    for w in words.tolist():
        ids += [w, PERIOD]
    ids.append(SEP)
    ids = torch.tensor(ids, device=device).expand(batch, -1).contiguous()
    # category k's name is token 1 + 2k
    return ids, torch.ones_like(ids), torch.zeros_like(ids)


model = GroundingDinoForObjectDetection(config).to(device)
model.model.text_backbone.requires_grad_(False)
backbone = [p for n, p in model.named_parameters() if n.startswith("model.backbone") and p.requires_grad]
backbone_ids = {id(p) for p in backbone}
rest = [p for p in model.parameters() if id(p) not in backbone_ids and p.requires_grad]
opt = torch.optim.AdamW([{"params": backbone, "lr": 1e-5}, {"params": rest, "lr": 1e-4}], weight_decay=1e-4)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, "
    f"backbone {sum(p.numel() for p in backbone):,}, rest trainable {sum(p.numel() for p in rest):,}"
)
report("phase0 grounding dino swin-t + bert, adamw, bert frozen")

model.eval()
kept = []
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda):
    for batch in range(2):
        ids, mask, types = prompt(6, B1)
        out = model(
            pixel_values=torch.rand(B1, 3, H1, W1, device=device),
            input_ids=ids,
            attention_mask=mask,
            token_type_ids=types,
        )
        scores = out.logits.sigmoid().max(-1).values
        top = scores.topk(TOP, dim=1)
        boxes = out.pred_boxes.gather(1, top.indices[..., None].expand(-1, -1, 4))
        kept.append((top.values, boxes))
        print(f"batch {batch} logits {tuple(out.logits.shape)} kept boxes {tuple(boxes.shape)}")
        del out
report(f"phase1 inference_mode fp16 autocast, 2 batches of {B1} at {H1}x{W1}, 6 categories")


def box_losses(pred, gt):
    l1 = F.l1_loss(pred, gt)
    giou = generalized_box_iou_loss(
        box_convert(pred, "cxcywh", "xyxy"), box_convert(gt, "cxcywh", "xyxy"), reduction="mean"
    )
    return 5.0 * l1 + 2.0 * giou


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


del kept
model.train()
for step in range(3):
    ids, mask, types = prompt(TRAIN_CATEGORIES, B2)
    pixels = torch.rand(B2, 3, S2, S2, device=device)
    labels = torch.randint(0, TRAIN_CATEGORIES, (B2, BOXES), device=device)
    centers = torch.rand(B2, BOXES, 2, device=device) * 0.6 + 0.2
    sizes = torch.rand(B2, BOXES, 2, device=device) * 0.3 + 0.05
    gt_boxes = torch.cat([centers, sizes], -1)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=pixels, input_ids=ids, attention_mask=mask, token_type_ids=types)
    tokens = ids.shape[1]
    logits = out.logits[:, :, :tokens].float()
    boxes = out.pred_boxes.float()
    target = torch.zeros_like(logits)
    pred_list, gt_list = [], []
    for b in range(B2):
        positions = 1 + 2 * labels[b]
        with torch.no_grad():
            cost = -logits[b].sigmoid()[:, positions] + 5.0 * torch.cdist(boxes[b], gt_boxes[b], p=1)
        q, g = greedy_match(cost)
        target[b, q, positions[g]] = 1.0
        pred_list.append(boxes[b][q])
        gt_list.append(gt_boxes[b][g])
    loss = sigmoid_focal_loss(logits, target, alpha=0.25, reduction="sum") / (B2 * BOXES)
    loss = loss + box_losses(torch.cat(pred_list), torch.cat(gt_list))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    print(f"fine-tune step {step} loss {loss.item():.4f}")
del out, logits, boxes, loss
report(f"phase2 three fine-tune steps at batch {B2} x {S2}^2, bf16 autocast, greedy matcher")

model.eval()
with torch.no_grad():
    ids, mask, types = prompt(LONG, B3)
    out = model(
        pixel_values=torch.rand(B3, 3, S3, S3, device=device),
        input_ids=ids,
        attention_mask=mask,
        token_type_ids=types,
    )
    scores = out.logits.sigmoid().max(-1).values
    top = scores.topk(TOP, dim=1)
    print(f"long prompt tokens {ids.shape[1]} logits {tuple(out.logits.shape)} best {top.values.shape}")
report(f"phase3 no_grad fp32, batch {B3} at {S3}x{S3}, {LONG} categories")
