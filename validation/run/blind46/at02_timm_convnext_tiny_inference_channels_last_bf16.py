"""Batch inference: timm's ConvNeXt-T (7x7 depthwise convolutions, LayerNorm over channels) in
bf16 and channels_last under inference_mode, 4 batches of 128 at 224x224, the top-5 classes of each
kept; 2 phases (the batches, then after freeing)."""

import os

import timm
import torch

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4602)
B, HW = (2, 64) if SMALL else (128, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = timm.create_model("convnext_tiny", pretrained=False).to(device, dtype)
model = model.to(memory_format=torch.channels_last).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
top = []
with torch.inference_mode():
    for _ in range(4):
        x = torch.randn(B, 3, HW, HW, device=device, dtype=dtype).to(memory_format=torch.channels_last)
        top.append(model(x).topk(5, dim=-1).indices)
if device == "cuda":
    print(f"batches peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del top, x
if device == "cuda":
    print(f"freed allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
