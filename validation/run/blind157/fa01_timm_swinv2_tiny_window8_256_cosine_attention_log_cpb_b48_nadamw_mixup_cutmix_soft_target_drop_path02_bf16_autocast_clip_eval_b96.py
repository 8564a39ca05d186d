"""Swin Transformer V2 tiny (timm's swinv2_tiny_window8_256, pretrained=False: scaled cosine
attention with a learned logit scale, the log-spaced continuous position bias MLP, res-post-norm,
window 8 at 256 x 256) trained the way timm's train.py does with `--opt nadamw --lr 1e-3
--weight-decay 0.05` (create_optimizer_v2: NAdamW, no decay on norms, biases and the position
bias tables), `--mixup 0.8 --cutmix 1.0 --smoothing 0.1` through timm's Mixup on the device batch
(NumPy seeded) and SoftTargetCrossEntropy, `--drop-path 0.2`, `--amp --amp-dtype bfloat16`
(bf16 autocast, no scaler), gradients clipped to norm 5.0; batch 48, 3 steps, each its own phase;
then evaluation at 256 x 256 in batches of 96 under no_grad and bf16 autocast over two batches,
top-1 and top-5; 4 phases."""

import os

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from timm.utils import accuracy

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15701)
np.random.seed(15701)
B, RES, EB, NCLS = (4, 64, 4, 10) if SMALL else (48, 256, 96, 1000)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model(
    "swinv2_tiny_window8_256",
    pretrained=False,
    num_classes=NCLS,
    drop_path_rate=0.2,
    img_size=RES,
)
model = model.to(device)
optimizer = create_optimizer_v2(model, opt="nadamw", lr=1e-3, weight_decay=0.05)
mixup_fn = Mixup(
    mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, label_smoothing=0.1, num_classes=NCLS
)
train_loss_fn = SoftTargetCrossEntropy()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    images = torch.randn(B, 3, RES, RES, device=device)
    target = torch.randint(0, NCLS, (B,), device=device)
    images, target = mixup_fn(images, target)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        output = model(images)
        loss = train_loss_fn(output, target)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del images, target, output, loss
model.eval()
top1_sum, top5_sum = 0.0, 0.0
with torch.no_grad():
    for _ in range(2):
        images = torch.randn(EB, 3, RES, RES, device=device)
        target = torch.randint(0, NCLS, (EB,), device=device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            output = model(images)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        top1_sum += acc1.item()
        top5_sum += acc5.item()
if device == "cuda":
    print(
        f"eval top1 {top1_sum / 2:.2f} top5 {top5_sum / 2:.2f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
