"""torchvision resnet50 converted with model.half(), fp16 inputs, inference under torch.no_grad at
growing batch sizes."""

import os

import torch
import torchvision

BATCHES, IMG = ((1, 2), 64) if os.environ.get("SMOKE") else ((16, 64, 128), 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = torchvision.models.resnet50().to(device).half().eval()
if device == "cuda":
    print(f"fp16 weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    for bs in BATCHES:
        images = torch.randn(bs, 3, IMG, IMG, device=device).half()
        probs = model(images).float().softmax(dim=-1)
        top5 = probs.topk(5, dim=-1)
        if device == "cuda":
            print(
                f"batch {bs} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
print(top5.indices.shape)
