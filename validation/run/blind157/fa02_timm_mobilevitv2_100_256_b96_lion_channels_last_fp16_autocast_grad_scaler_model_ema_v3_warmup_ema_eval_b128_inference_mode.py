"""MobileViT-v2 1.0 (timm's mobilevitv2_100, pretrained=False: inverted-residual MobileNet stages
and MobileViT-v2 blocks with separable linear self-attention and GroupNorm(1) layer norms) at
256 x 256, channels_last, trained with create_optimizer_v2(opt="lion", lr=2e-4, weight_decay=0.05)
(timm's Lion, norms and biases without decay), `--drop-path 0.05`, fp16 autocast with timm-style
NativeScaler use of torch.amp.GradScaler (init scale 2 ** 10), timm.utils.ModelEmaV3 (decay 0.9998
with warmup, updated after each step with the step count); batch 96, 3 steps, each its own phase;
then evaluation of the EMA weights (ema.module) at batch 128 under inference_mode and fp16 autocast,
channels_last input, over two batches; 4 phases."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.utils import ModelEmaV3

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15702)
B, RES, EB, NCLS = (4, 64, 4, 10) if SMALL else (96, 256, 128, 1000)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
use_amp = device == "cuda"

model = timm.create_model("mobilevitv2_100", pretrained=False, num_classes=NCLS, drop_path_rate=0.05)
model = model.to(device=device, memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="lion", lr=2e-4, weight_decay=0.05)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10, enabled=use_amp)
model_ema = ModelEmaV3(model, decay=0.9998, use_warmup=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
num_updates = 0
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    num_updates += 1
    model_ema.update(model, step=num_updates)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} scale {scaler.get_scale():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del x, y, logits, loss
ema_model = model_ema.module
ema_model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
    for _ in range(2):
        x = torch.randn(EB, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, NCLS, (EB,), device=device)
        correct += (ema_model(x).argmax(-1) == y).sum().item()
if device == "cuda":
    print(
        f"ema eval top1 {correct / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
