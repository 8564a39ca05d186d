"""MobileNetV3-Large as timm's train.py trains it (the model card's recipe: `--opt rmsproptf
--opt-eps .001 --weight-decay 1e-5 --drop 0.2 --drop-path 0.2 --model-ema --reprob 0.2 --remode
pixel --amp`, label smoothing 0.1), here at 256 x 256 with batch 160: timm's mobilenetv3_large_100
built from its constructor, channels-last, bf16 autocast, timm's RMSpropTF from create_optimizer_v2
(no weight decay on norms and biases), random erasing in pixel mode on the device batch (Python's
`random` seeded, one normal patch per erased image), LabelSmoothingCrossEntropy, ModelEmaV3
(foreach lerp) updated after every step; 4 steps, then the EMA model and the live model evaluated
at 288 under no_grad on 2 batches of 200; 6 phases."""

import os
import random

import numpy as np
import timm
import torch
from timm.data.random_erasing import RandomErasing
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2
from timm.utils import ModelEmaV3

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14501)
random.seed(14501)
np.random.seed(14501)
B, RES, EB, ERES, NCLS = (4, 64, 4, 64, 10) if SMALL else (160, 256, 200, 288, 1000)
STEPS = 2 if SMALL else 4
device = "cuda" if torch.cuda.is_available() else "cpu"
CL = torch.channels_last

model = timm.create_model(
    "mobilenetv3_large_100", pretrained=False, num_classes=NCLS, drop_rate=0.2, drop_path_rate=0.2
)
model = model.to(device, memory_format=CL)
opt = create_optimizer_v2(model, opt="rmsproptf", lr=0.064 * B / 512, weight_decay=1e-5, eps=1e-3)
ema = ModelEmaV3(model, decay=0.9998)
erase = RandomErasing(probability=0.2, mode="pixel", device=device)
criterion = LabelSmoothingCrossEntropy(smoothing=0.1)
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
if device == "cuda":
    print(f"model+ema {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    raw = torch.randint(0, 256, (B, 3, RES, RES), dtype=torch.uint8, device=device)
    x = raw.float().sub_(mean).div_(std)
    x = erase(x).contiguous(memory_format=CL)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(x)
        loss = criterion(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ema.update(model, step=step)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del out, loss, x, raw, y
model.eval()
agree = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(2):
        x = torch.randn(EB, 3, ERES, ERES, device=device).contiguous(memory_format=CL)
        p_ema = ema.module(x).argmax(-1)
        p_live = model(x).argmax(-1)
        agree += (p_ema == p_live).sum().item()
if device == "cuda":
    print(
        f"eval agree {agree / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
