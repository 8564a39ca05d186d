"""torchvision vit_b_16 (random init) inference under torch.no_grad at two batch sizes."""

import os

import torch
import torchvision

BATCHES, IMG = ((1, 2), 64) if os.environ.get("SMOKE") else ((8, 32), 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

model = torchvision.models.vit_b_16(image_size=IMG).to(device).eval()
if device == "cuda":
    print(f"weights {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    for bs in BATCHES:
        x = torch.randn(bs, 3, IMG, IMG, device=device)
        logits = model(x)
        pred = logits.argmax(dim=-1)
        if device == "cuda":
            print(
                f"batch {bs} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
        del x, logits
print(pred.shape)
