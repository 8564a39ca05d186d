"""torchvision resnet50 (random weights) in fp16 and channels_last with
torch.backends.cudnn.benchmark = True (cuDNN times its algorithms on the first call of each shape),
inference under no_grad at batch 64, twice, then batch 32; 4 phases."""

import os

import torch
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2301)
torch.backends.cudnn.benchmark = True
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = torchvision.models.resnet50().to(device=device, dtype=dtype, memory_format=torch.channels_last).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
R = 64 if SMALL else 224
for b in (2, 2, 1) if SMALL else (64, 64, 32):
    x = torch.randn(b, 3, R, R, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    with torch.no_grad():
        top = model(x).argmax(-1)
    del x, top
    if device == "cuda":
        print(f"batch {b} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
