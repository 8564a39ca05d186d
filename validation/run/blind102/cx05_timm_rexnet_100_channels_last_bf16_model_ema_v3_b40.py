"""timm ReXNet-1.0 (depthwise 3x3 inverted bottlenecks, SE, SiLU / ReLU6) trained from scratch on
176 x 176 crops, channels-last, bf16 autocast, timm's ModelEmaV3 EMA weights updated after each
step, RMSprop (timm-style eps 1e-3) with weight decay, label smoothing 0.1; batch 40, 3 steps; then
an evaluation of 100 images at 208 x 208 through the EMA model under inference_mode; 5 phases."""

import os

import timm
import torch
import torch.nn as nn
from timm.utils import ModelEmaV3

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10205)
B, R, R_EVAL, STEPS, NCLS = (2, 64, 80, 2, 10) if SMALL else (40, 176, 208, 3, 200)
EVAL_N = 4 if SMALL else 100
device = "cuda" if torch.cuda.is_available() else "cpu"

model = timm.create_model("rexnet_100", num_classes=NCLS, drop_path_rate=0.05).to(device)
model = model.to(memory_format=torch.channels_last)
ema = ModelEmaV3(model, decay=0.999, device=device)
opt = torch.optim.RMSprop(model.parameters(), lr=0.016, alpha=0.9, eps=1e-3, momentum=0.9, weight_decay=1e-5)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = crit(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ema.update(model, step=step)
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
ema.module.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    x = torch.randn(EVAL_N, 3, R_EVAL, R_EVAL, device=device).contiguous(memory_format=torch.channels_last)
    pred = ema.module(x).argmax(-1)
if device == "cuda":
    print(
        f"eval {pred.shape} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
