"""SegFormer from transformers configs, no weights: SegformerForSemanticSegmentation at the mit-b2 size
(hidden sizes 64/128/320/512, depths 3/4/6/3, heads 1/2/5/8, sr ratios 8/4/2/1, all-MLP decoder of
768, 150 ADE20K classes). Training on random 512 x 512 crops at batch 16 under fp16 autocast with
torch.amp.GradScaler: the model computes its own loss from `labels` (logits upsampled bilinearly to
the label size, cross-entropy with semantic_loss_ignore_index=255; labels int64 with ~5% ignore).
AdamW (lr 6e-5, weight decay 0.01) with two parameter groups, the decode head at 10x lr as the paper
does, and a poly LambdaLR. Phases: the first step; 3 steady steps; multi-scale (0.75, 1.0, 1.25, 1.5)
plus horizontal-flip TTA under inference_mode on 2 images of 512 x 683 (each scale resized with
bilinear interpolation, logits upsampled back and the softmaxes summed, argmax at the end); then a
mit-b0 model (32/64/160/256, depths 2/2/2/2, decoder 256, 19 classes) trained in fp32 with Adam
(foreach=False) at batch 4 on 1024 x 1024 with a hand-written Dice + cross-entropy loss on the logits
upsampled to full size, 3 steps; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import SegformerConfig, SegformerForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18402)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, CROP, STEPS, TTA_H, TTA_W, B0_B, B0_CROP = 2, 128, 2, 128, 171, 1, 128
else:
    B, CROP, STEPS, TTA_H, TTA_W, B0_B, B0_CROP = 16, 512, 4, 512, 683, 4, 1024

cfg_b2 = SegformerConfig(
    hidden_sizes=[64, 128, 320, 512],
    depths=[3, 4, 6, 3],
    num_attention_heads=[1, 2, 5, 8],
    decoder_hidden_size=768,
    num_labels=150,
    semantic_loss_ignore_index=255,
)
model = SegformerForSemanticSegmentation(cfg_b2).to(device)
head_params = [p for n, p in model.named_parameters() if n.startswith("decode_head")]
body_params = [p for n, p in model.named_parameters() if not n.startswith("decode_head")]
optimizer = torch.optim.AdamW(
    [{"params": body_params, "lr": 6e-5}, {"params": head_params, "lr": 6e-4}], weight_decay=0.01
)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: (1 - it / 160000) ** 1.0)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
print(f"mit-b2 params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def ade_batch(bs, h, w, num_classes, ignore_frac):
    pixel_values = torch.randn(bs, 3, h, w, device=device)
    labels = torch.randint(0, num_classes, (bs, h, w), device=device)
    labels = labels.masked_fill(torch.rand(bs, h, w, device=device) < ignore_frac, 255)
    return pixel_values, labels


model.train()
for step in range(STEPS):
    pixel_values, labels = ade_batch(B, CROP, CROP, 150, 0.05)
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
        outputs = model(pixel_values=pixel_values, labels=labels)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(outputs.loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    print(f"step {step} loss {outputs.loss.item():.4f} scale {scaler.get_scale()}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del outputs, pixel_values, labels
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
scales = [0.75, 1.0, 1.25, 1.5]
with torch.inference_mode():
    images = torch.randn(2, 3, TTA_H, TTA_W, device=device)
    prob_sum = torch.zeros(2, 150, TTA_H, TTA_W, device=device)
    for s in scales:
        size = (int(TTA_H * s + 0.5), int(TTA_W * s + 0.5))
        scaled = F.interpolate(images, size=size, mode="bilinear", align_corners=False)
        for flip in (False, True):
            inp = scaled.flip(-1) if flip else scaled
            logits = model(pixel_values=inp).logits
            if flip:
                logits = logits.flip(-1)
            logits = F.interpolate(logits, size=(TTA_H, TTA_W), mode="bilinear", align_corners=False)
            prob_sum += logits.softmax(dim=1)
    pred = prob_sum.argmax(dim=1)
    print(f"tta pred {tuple(pred.shape)} classes {pred.unique().numel()}")
del images, prob_sum, scaled, inp, logits, pred
if device == "cuda":
    print(f"tta peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, scheduler, scaler, head_params, body_params
cfg_b0 = SegformerConfig(num_labels=19, semantic_loss_ignore_index=255)
small = SegformerForSemanticSegmentation(cfg_b0).to(device)
opt_b0 = torch.optim.Adam(small.parameters(), lr=1e-4, foreach=False)


def dice_ce_loss(logits, labels, num_classes, eps=1.0):
    logits = F.interpolate(logits, size=labels.shape[-2:], mode="bilinear", align_corners=False)
    ce = F.cross_entropy(logits, labels, ignore_index=255)
    valid = (labels != 255).unsqueeze(1)
    onehot = F.one_hot(labels.clamp(max=num_classes - 1), num_classes).permute(0, 3, 1, 2).float()
    probs = logits.softmax(dim=1) * valid
    onehot = onehot * valid
    inter = (probs * onehot).sum(dim=(0, 2, 3))
    denom = probs.sum(dim=(0, 2, 3)) + onehot.sum(dim=(0, 2, 3))
    dice = 1 - ((2 * inter + eps) / (denom + eps)).mean()
    return ce + dice


small.train()
for step in range(3):
    pixel_values, labels = ade_batch(B0_B, B0_CROP, B0_CROP, 19, 0.1)
    logits = small(pixel_values=pixel_values).logits
    loss = dice_ce_loss(logits, labels, 19)
    opt_b0.zero_grad()
    loss.backward()
    opt_b0.step()
    print(f"b0 step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"b0 allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
