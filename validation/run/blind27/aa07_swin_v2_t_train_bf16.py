"""torchvision's swin_v2_t (shifted windows with roll, cosine attention, the continuous position
bias MLP, patch merging) trained under bf16 autocast at batch 32 of 256x256 images, AdamW (foreach),
label smoothing 0.1, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import swin_v2_t

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2707)
B, R = (2, 64) if SMALL else (32, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = swin_v2_t(num_classes=100).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, R, R, device=device)
    labels = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
