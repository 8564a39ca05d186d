"""Fine-tuning Segment Anything the way the Hugging Face SAM fine-tuning tutorial does it, then the usual
variations: a SamModel of ViT-B size from `SamConfig()` (random init, 1,024 x 1,024 inputs, 256 x 256 low
resolution masks), the vision and prompt encoders frozen (`requires_grad_(False)` on every parameter whose
name starts with them), Adam (lr 1e-5) over the mask decoder only, one box prompt per image with
`multimask_output=False`, and a Dice + BCE loss on the logits written by hand (monai's
`DiceCELoss(sigmoid=True)`
in the tutorial).

Phases: 0 model and Adam; 1 three steps at batch 4 through the whole model (the frozen encoder runs in every
step without saving anything for backward); 2 the image embeddings of 4 images computed once by
`get_image_embeddings` under `no_grad`, then three decoder steps at batch 4 with 8 boxes per image passed
as `image_embeddings=`; 3 MedSAM-style: the vision encoder unfrozen, AdamW over encoder and decoder, bf16
autocast, three steps at batch 2; 4 `inference_mode` with 16 point prompts per image and
`multimask_output=True` at batch 4 under bf16 autocast. Seeded; no sizes depend on values."""

import os

import torch
import torch.nn.functional as F
from transformers import SamConfig, SamModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3501)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    vision = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, global_attn_indexes=[1], mlp_dim=64
    )
    config = SamConfig(vision_config=vision)
    B1, B2, BOXES, B3, B4, POINTS = 1, 2, 2, 1, 1, 2
else:
    config = SamConfig()
    B1, B2, BOXES, B3, B4, POINTS = 4, 4, 8, 2, 4, 16
IMG = 1024


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


def dice_bce(logits, target):
    prob = logits.sigmoid()
    inter = (prob * target).sum((-2, -1))
    dice = 1 - (2 * inter + 1e-5) / (prob.sum((-2, -1)) + target.sum((-2, -1)) + 1e-5)
    return dice.mean() + F.binary_cross_entropy_with_logits(logits, target)


def images(n):
    return torch.randn(n, 3, IMG, IMG, device=device)


def boxes(n, k):
    xy = torch.rand(n, k, 2, device=device) * (IMG / 2)
    wh = torch.rand(n, k, 2, device=device) * (IMG / 2) + 32
    return torch.cat([xy, xy + wh], dim=-1)


def masks(n, k):
    return (torch.rand(n, k, 256, 256, device=device) > 0.5).float()


model = SamModel(config).to(device)
for name, p in model.named_parameters():
    if name.startswith("vision_encoder") or name.startswith("prompt_encoder"):
        p.requires_grad_(False)
opt = torch.optim.Adam(model.mask_decoder.parameters(), lr=1e-5, weight_decay=0)
print(
    f"parameters {sum(p.numel() for p in model.parameters()):,}, trainable "
    f"{sum(p.numel() for p in model.parameters() if p.requires_grad):,}"
)
report("phase0 sam vit-b + adam over the mask decoder")

model.train()
for step in range(3):
    out = model(pixel_values=images(B1), input_boxes=boxes(B1, 1), multimask_output=False)
    loss = dice_bce(out.pred_masks.squeeze(1), masks(B1, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"tutorial step {step} loss {loss.item():.4f}")
del out, loss
report(f"phase1 three tutorial steps at batch {B1}")

with torch.no_grad():
    embeddings = model.get_image_embeddings(images(B2))
print(f"image embeddings {tuple(embeddings.shape)}")
for step in range(3):
    out = model(image_embeddings=embeddings, input_boxes=boxes(B2, BOXES), multimask_output=False)
    loss = dice_bce(out.pred_masks.squeeze(2), masks(B2, BOXES))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"cached-embedding step {step} loss {loss.item():.4f}")
del out, loss, embeddings
report(f"phase2 embeddings cached, three decoder steps at {B2} x {BOXES} boxes")

for p in model.vision_encoder.parameters():
    p.requires_grad_(True)
del opt
opt = torch.optim.AdamW(
    [p for n, p in model.named_parameters() if not n.startswith("prompt_encoder")], lr=1e-4, weight_decay=0.01
)
for step in range(3):
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
        out = model(pixel_values=images(B3), input_boxes=boxes(B3, 1), multimask_output=False)
        loss = dice_bce(out.pred_masks.squeeze(1).float(), masks(B3, 1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"medsam step {step} loss {loss.item():.4f}")
del out, loss
report(f"phase3 encoder + decoder, bf16 autocast, three steps at {B3}")

model.eval()
with torch.inference_mode(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
    for _ in range(2):
        points = torch.rand(B4, POINTS, 1, 2, device=device) * IMG
        labels = torch.ones(B4, POINTS, 1, dtype=torch.long, device=device)
        out = model(pixel_values=images(B4), input_points=points, input_labels=labels, multimask_output=True)
        best = out.iou_scores.argmax(-1)
        print(f"pred_masks {tuple(out.pred_masks.shape)}, best mask index sum {best.sum().item()}")
        del out
report(f"phase4 inference_mode, {POINTS} point prompts x 3 masks at batch {B4}")
