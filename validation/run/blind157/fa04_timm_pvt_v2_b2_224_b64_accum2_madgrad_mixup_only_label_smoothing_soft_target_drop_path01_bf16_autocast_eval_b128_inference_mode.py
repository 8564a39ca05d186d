"""Pyramid Vision Transformer v2 B2 (timm's pvt_v2_b2, pretrained=False: overlapping patch
embeddings by strided convolutions, spatial-reduction attention (a strided conv and LayerNorm
shrinking keys and values by 8, 4, 2, 1 per stage), a depthwise 3 x 3 conv inside each MLP,
drop path 0.1) trained with create_optimizer_v2(opt="madgrad", lr=2e-3, weight_decay=1e-4,
momentum=0.9) (timm's MADGRAD, dual averaging with a cube-root denominator, norms and biases
without decay); timm's Mixup with mixup only (alpha 0.8, cutmix off) and label smoothing 0.1 on
each micro-batch with SoftTargetCrossEntropy; bf16 autocast; an effective batch of 64 as 2
micro-batches of 32 with the loss divided by 2 and one optimizer step; 224 x 224, 3 steps, each
its own phase; then evaluation at batch 128 under inference_mode and bf16 autocast over two
batches; 4 phases."""

import os

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15704)
np.random.seed(15704)
MB, ACCUM, RES, EB, NCLS = (2, 2, 64, 4, 10) if SMALL else (32, 2, 224, 128, 1000)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = timm.create_model("pvt_v2_b2", pretrained=False, num_classes=NCLS, drop_path_rate=0.1)
model = model.to(device)
optimizer = create_optimizer_v2(model, opt="madgrad", lr=2e-3, weight_decay=1e-4, momentum=0.9)
mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=0.0, label_smoothing=0.1, num_classes=NCLS)
criterion = SoftTargetCrossEntropy()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    optimizer.zero_grad(set_to_none=True)
    running = 0.0
    for _ in range(ACCUM):
        samples = torch.randn(MB, 3, RES, RES, device=device)
        targets = torch.randint(0, NCLS, (MB,), device=device)
        samples, targets = mixup_fn(samples, targets)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            outputs = model(samples)
            loss = criterion(outputs, targets) / ACCUM
        loss.backward()
        running += loss.item()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {running:.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del samples, targets, outputs, loss
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(2):
        samples = torch.randn(EB, 3, RES, RES, device=device)
        targets = torch.randint(0, NCLS, (EB,), device=device)
        correct += (model(samples).argmax(dim=1) == targets).sum().item()
if device == "cuda":
    print(
        f"eval acc {correct / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
