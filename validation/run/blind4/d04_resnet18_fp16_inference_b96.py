"""torchvision resnet18 .half() inference under no_grad at batch 96, then batch 24."""

import os

import torch
import torchvision

B, IMG = (2, 64) if os.environ.get("SMOKE") else (96, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
torch.manual_seed(44)
model = torchvision.models.resnet18(num_classes=1000).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for batch in (B, B // 4):
    x = torch.randn(batch, 3, IMG, IMG, device=device, dtype=dtype)
    with torch.no_grad():
        logits = model(x)
    top = logits.argmax(dim=1)
    if device == "cuda":
        print(f"batch {batch} peak {torch.cuda.max_memory_allocated()} top0 {int(top[0])}")
        torch.cuda.reset_peak_memory_stats()
    del x, logits, top
