"""UperNet with a ConvNeXt-tiny backbone, both from transformers configs (UperNetConfig with a
ConvNextConfig of depths 3/3/9/3 and widths 96/192/384/768, out_features stage1..stage4, drop path 0.3;
the PPM + FPN decode head of 512 channels and the auxiliary FCN head, 19 Cityscapes classes),
trained on random 512 x 1024 crops, 4 images per micro-batch and 2 micro-batches per optimizer step,
under bf16 autocast: the model's own loss from `labels` (cross-entropy with loss_ignore_index=255 on
the main and 0.4 x the auxiliary logits, both upsampled to the input size) plus 0.5 x a Lovasz-softmax
loss written by hand after Berman et al.'s reference code (classes='all', per_image=False: per class
the absolute errors sorted descending, the Lovasz gradient from cumulative sums of the sorted
foreground, a dot product), over the valid (non-ignore) pixels selected with a boolean mask. AdamW
fused (lr 1e-4, weight decay 0.05), clip_grad_norm_ 1.0, each loss divided by the accumulation count.
Phases: the first optimizer step (2 micro-batches); 2 more steps; evaluation under no_grad at full
1024 x 2048 resolution, batch 2, argmax and a per-class confusion count with bincount; then a second
UperNet with a Swin-tiny backbone (SwinConfig, window 7, 96/192/384/768, depths 2/2/6/2, 150 classes)
cast to half() and run under inference_mode at batch 8 on 512 x 512; 4 phases."""

import os

import torch
from transformers import ConvNextConfig, SwinConfig, UperNetConfig, UperNetForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18403)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    MB, CH, CW, STEPS, EH, EW, EB, SWIN_B, SWIN_S = 2, 64, 128, 2, 128, 256, 1, 2, 128
else:
    MB, CH, CW, STEPS, EH, EW, EB, SWIN_B, SWIN_S = 4, 512, 1024, 3, 1024, 2048, 2, 8, 512
ACCUM = 2
NUM_CLASSES = 19

backbone_cfg = ConvNextConfig(
    depths=[3, 3, 9, 3],
    hidden_sizes=[96, 192, 384, 768],
    drop_path_rate=0.3,
    out_features=["stage1", "stage2", "stage3", "stage4"],
)
config = UperNetConfig(
    backbone_config=backbone_cfg,
    hidden_size=512,
    num_labels=NUM_CLASSES,
    use_auxiliary_head=True,
    auxiliary_loss_weight=0.4,
    loss_ignore_index=255,
)
model = UperNetForSemanticSegmentation(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=device == "cuda")
print(f"upernet-convnext-t params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def lovasz_grad(gt_sorted):
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.cumsum(0)
    union = gts + (1 - gt_sorted).cumsum(0)
    jaccard = 1.0 - intersection / union
    jaccard[1:] = jaccard[1:] - jaccard[:-1]
    return jaccard


def lovasz_softmax(logits, labels, ignore=255):
    probs = logits.softmax(dim=1)
    c = probs.size(1)
    probs = probs.permute(0, 2, 3, 1).reshape(-1, c)
    labels = labels.reshape(-1)
    valid = labels != ignore
    vprobs = probs[valid]
    vlabels = labels[valid]
    losses = []
    for cls in range(c):
        fg = (vlabels == cls).float()
        errors = (fg - vprobs[:, cls]).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        fg_sorted = fg[perm]
        losses.append(torch.dot(errors_sorted, lovasz_grad(fg_sorted)))
    return torch.stack(losses).mean()


def city_batch(bs, h, w):
    pixel_values = torch.randn(bs, 3, h, w, device=device)
    labels = torch.randint(0, NUM_CLASSES, (bs, h, w), device=device)
    labels[:, : h // 16] = 255  # the ego-vehicle / border region is unlabeled
    return pixel_values, labels


model.train()
for step in range(STEPS):
    optimizer.zero_grad(set_to_none=True)
    for _ in range(ACCUM):
        pixel_values, labels = city_batch(MB, CH, CW)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            outputs = model(pixel_values=pixel_values, labels=labels)
            loss = outputs.loss + 0.5 * lovasz_softmax(outputs.logits.float(), labels)
        (loss / ACCUM).backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f} grad norm {grad_norm.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del outputs, loss, pixel_values, labels
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
confusion = torch.zeros(NUM_CLASSES, NUM_CLASSES, dtype=torch.long, device=device)
with torch.no_grad():
    for _ in range(2):
        pixel_values, labels = city_batch(EB, EH, EW)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(pixel_values=pixel_values).logits
        pred = logits.argmax(dim=1)
        valid = labels != 255
        idx = labels[valid] * NUM_CLASSES + pred[valid]
        confusion += torch.bincount(idx, minlength=NUM_CLASSES**2).reshape(NUM_CLASSES, NUM_CLASSES)
iou = confusion.diag() / (confusion.sum(0) + confusion.sum(1) - confusion.diag()).clamp(min=1)
print(f"mIoU {iou.mean().item():.4f}")
del pixel_values, labels, logits, pred, valid, idx
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer
swin_cfg = SwinConfig(
    embed_dim=96,
    depths=[2, 2, 6, 2],
    num_heads=[3, 6, 12, 24],
    window_size=7,
    out_features=["stage1", "stage2", "stage3", "stage4"],
)
swin_model = UperNetForSemanticSegmentation(
    UperNetConfig(backbone_config=swin_cfg, hidden_size=512, num_labels=150, use_auxiliary_head=False)
)
swin_model = swin_model.half().to(device).eval()
with torch.inference_mode():
    for _ in range(2):
        images = torch.randn(SWIN_B, 3, SWIN_S, SWIN_S, device=device, dtype=torch.float16)
        seg = swin_model(pixel_values=images).logits.argmax(dim=1).to(torch.uint8)
        print(f"swin seg {tuple(seg.shape)} {seg.dtype}")
if device == "cuda":
    print(
        f"swin allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
