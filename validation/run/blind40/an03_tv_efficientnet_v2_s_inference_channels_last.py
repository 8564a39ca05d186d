"""Batch inference with torchvision's EfficientNetV2-S (no weights) in bf16, channels_last, under
torch.inference_mode, three batches of 64 images at 384x384 with top-5 predictions kept; 4 phases."""

import os

import torch
from torchvision.models import efficientnet_v2_s

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4003)
B, H = (2, 64) if SMALL else (64, 384)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = (
    efficientnet_v2_s(weights=None).to(device=device, dtype=dtype, memory_format=torch.channels_last).eval()
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
kept = []
with torch.inference_mode():
    for i in range(3):
        x = torch.randn(B, 3, H, H, device=device, dtype=dtype).to(memory_format=torch.channels_last)
        kept.append(model(x).topk(5, dim=-1).indices)
        del x
        if device == "cuda":
            print(
                f"batch {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
