"""timm EdgeNeXt-Small (conv encoders plus split-depthwise transpose attention) in channels_last, bf16
autocast, AdamW, drop-path 0.1, a timm `ModelEmaV3` copy (decay 0.9998, warmup) updated after each
step, batch 64 at 256x256, 3 steps, then the EMA copy evaluated under `torch.inference_mode`;
5 phases."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.utils import ModelEmaV3

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8703)
B, R, C = (2, 64, 10) if SMALL else (64, 256, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("edgenext_small", num_classes=C, drop_path_rate=0.1)
model = model.to(device, memory_format=torch.channels_last)
ema = ModelEmaV3(model, decay=0.9998, use_warmup=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, C, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema.update(model, step=step)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(B, 3, R, R, device=device).contiguous(memory_format=torch.channels_last)
    pred = ema.module(x).softmax(-1).argmax(-1)
del x, pred
if device == "cuda":
    print(f"ema eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
