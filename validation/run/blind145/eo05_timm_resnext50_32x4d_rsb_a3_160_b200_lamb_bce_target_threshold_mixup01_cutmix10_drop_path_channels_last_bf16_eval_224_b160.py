"""ResNet strikes back's A3 procedure (Wightman, Touvron and Jegou 2021) applied to ResNeXt-50
32x4d, as timm's train.py runs it: `--opt lamb --lr 8e-3 --weight-decay 0.02 --bce-loss
--bce-target-thresh 0.2 --mixup 0.1 --cutmix 1.0 --smoothing 0.0 --drop-path 0.05 --amp
--channels-last`, training at 160 x 160 and testing at 224; timm's resnext50_32x4d from its
constructor, timm's Lamb (its global gradient-norm clipping at 1.0, no weight decay on norms and
biases) with the lr scaled to batch 200, timm's Mixup on the device batch (NumPy seeded), timm's
BinaryCrossEntropy with the mixed targets thresholded at 0.2, bf16 autocast, 3 steps; then
evaluation at 224 x 224 in batches of 160 under inference_mode and bf16 autocast, sigmoid
scores and top-1; 5 phases."""

import os

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import BinaryCrossEntropy
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14505)
np.random.seed(14505)
B, RES, EB, ERES, NCLS = (4, 64, 4, 96, 10) if SMALL else (200, 160, 160, 224, 1000)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
CL = torch.channels_last

model = timm.create_model("resnext50_32x4d", pretrained=False, num_classes=NCLS, drop_path_rate=0.05)
model = model.to(device, memory_format=CL)
opt = create_optimizer_v2(model, opt="lamb", lr=8e-3 * B / 2048, weight_decay=0.02)
mixup_fn = Mixup(mixup_alpha=0.1, cutmix_alpha=1.0, label_smoothing=0.0, num_classes=NCLS)
criterion = BinaryCrossEntropy(smoothing=0.0, target_threshold=0.2)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    x, y_mixed = mixup_fn(x, y)
    x = x.contiguous(memory_format=CL)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(x)
        loss = criterion(out, y_mixed)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del out, loss, x, y, y_mixed
model.eval()
correct, score = 0, 0.0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, ERES, ERES, device=device).contiguous(memory_format=CL)
        y = torch.randint(0, NCLS, (EB,), device=device)
        logits = model(x)
        score += logits.float().sigmoid().amax(-1).mean().item()
        correct += (logits.argmax(-1) == y).sum().item()
if device == "cuda":
    print(
        f"eval top1 {correct / (2 * EB):.3f} score {score / 2:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
