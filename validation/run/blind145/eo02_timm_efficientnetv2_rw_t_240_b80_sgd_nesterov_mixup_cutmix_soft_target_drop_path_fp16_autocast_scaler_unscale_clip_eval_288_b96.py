"""EfficientNetV2-RW-T (timm's efficientnetv2_rw_t, built from its constructor) trained the way
timm's train.py does with `--opt sgd` (SGD with Nesterov momentum from create_optimizer_v2, weight
decay off on norms and biases), `--mixup 0.8 --cutmix 1.0 --smoothing 0.1` through timm's Mixup
on the device batch (NumPy seeded, so mixup or cutmix and the box are chosen the same each run)
and SoftTargetCrossEntropy, `--drop-path 0.1`, `--amp` in fp16 with a GradScaler (init scale
2 ** 8, well inside fp16's range, so no step is skipped), the gradients unscaled and clipped to
norm 1.0 before the step; contiguous (NCHW) layout, 240 x 240 at batch 80, 4 steps; then
evaluation at the model's test size 288 x 288 in batches of 96 under inference_mode and fp16
autocast, top-1 over 2 batches; 6 phases."""

import os

import numpy as np
import timm
import torch
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14502)
np.random.seed(14502)
B, RES, EB, ERES, NCLS = (4, 64, 4, 64, 10) if SMALL else (80, 240, 96, 288, 1000)
STEPS = 2 if SMALL else 4
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model("efficientnetv2_rw_t", pretrained=False, num_classes=NCLS, drop_path_rate=0.1)
model = model.to(device)
opt = create_optimizer_v2(model, opt="sgd", lr=0.1 * B / 256, weight_decay=1e-5, momentum=0.9)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**8, enabled=device == "cuda")
mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, label_smoothing=0.1, num_classes=NCLS)
criterion = SoftTargetCrossEntropy()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device)
    y = torch.randint(0, NCLS, (B,), device=device)
    x, y_soft = mixup_fn(x, y)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        out = model(x)
        loss = criterion(out, y_soft)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} gnorm {gnorm.item():.3f} scale {scaler.get_scale():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del out, loss, x, y, y_soft, gnorm
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, ERES, ERES, device=device)
        y = torch.randint(0, NCLS, (EB,), device=device)
        correct += (model(x).argmax(-1) == y).sum().item()
if device == "cuda":
    print(
        f"eval top1 {correct / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
