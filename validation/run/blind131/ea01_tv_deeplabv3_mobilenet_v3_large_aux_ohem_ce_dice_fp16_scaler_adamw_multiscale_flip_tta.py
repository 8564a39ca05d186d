"""torchvision DeepLabV3 with a MobileNetV3-Large backbone (random weights, aux_loss=True: the FCN head
on the stride-8 features), 21 classes, trained on batch 12 of 512x512 crops under fp16 autocast and a
GradScaler: an OHEM cross-entropy (per-pixel losses with ignore_index 255, the hardest 25% kept by
topk), a soft Dice loss on the softmax of the main output and 0.4 x the aux cross-entropy, AdamW with
separate no-decay groups for norms and biases, gradients unscaled and clipped, 3 steps; then
evaluation under no_grad and fp16 autocast with multi-scale (0.75, 1, 1.25) and horizontal-flip
test-time augmentation on batch 4 of 512x683 images (logits upsampled back and summed) and a
confusion matrix by bincount; 5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13101)
NC = 21
B, S, EB, EH, EW = (2, 128, 1, 96, 128) if SMALL else (12, 512, 4, 512, 683)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=NC, aux_loss=True)
model = model.to(device)
decay, no_decay = [], []
for _name, p in model.named_parameters():
    (no_decay if p.ndim <= 1 else decay).append(p)
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}], lr=3e-4
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def ohem_ce(logits, target, keep=0.25):
    pix = F.cross_entropy(logits, target, ignore_index=255, reduction="none").flatten()
    valid = (target.flatten() != 255).sum()
    k = max(int(pix.numel() * keep), 1)
    hard, _ = pix.topk(k)
    return hard.sum() / torch.clamp(valid, min=1).float() * (pix.numel() / k) * keep


def dice_loss(logits, target):
    prob = logits.float().softmax(1)
    valid = (target != 255)[:, None]
    onehot = F.one_hot(target.clamp(max=NC - 1), NC).permute(0, 3, 1, 2).float() * valid
    prob = prob * valid
    inter = (prob * onehot).sum((0, 2, 3))
    union = prob.sum((0, 2, 3)) + onehot.sum((0, 2, 3))
    return 1 - ((2 * inter + 1) / (union + 1)).mean()


model.train()
for step in range(3):
    x = torch.randn(B, 3, S, S, device=device)
    y = torch.randint(0, NC, (B, S, S), device=device)
    y[:, : S // 16] = 255
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        out = model(x)
        loss = (
            ohem_ce(out["out"], y)
            + dice_loss(out["out"], y)
            + 0.4 * F.cross_entropy(out["aux"], y, ignore_index=255)
        )
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} gn {gn.item():.2f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, loss, x, y

model.eval()
conf = torch.zeros(NC * NC, dtype=torch.long, device=device)
x = torch.randn(EB, 3, EH, EW, device=device)
y = torch.randint(0, NC, (EB, EH, EW), device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    total = torch.zeros(EB, NC, EH, EW, device=device)
    for s in (0.75, 1.0, 1.25):
        xs = F.interpolate(x, scale_factor=s, mode="bilinear", align_corners=False)
        for flip in (False, True):
            inp = xs.flip(-1) if flip else xs
            logits = model(inp)["out"]
            if flip:
                logits = logits.flip(-1)
            total += F.interpolate(logits, size=(EH, EW), mode="bilinear", align_corners=False).softmax(1)
    pred = total.argmax(1)
conf += torch.bincount((y * NC + pred).flatten(), minlength=NC * NC)
conf = conf.view(NC, NC)
iou = conf.diag() / (conf.sum(0) + conf.sum(1) - conf.diag()).clamp(min=1)
if device == "cuda":
    print(
        f"tta miou {iou.mean().item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
