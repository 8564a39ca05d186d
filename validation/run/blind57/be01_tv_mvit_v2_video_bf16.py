"""torchvision's MViT-v2-S video classifier (pooling attention with relative positions) trained
from scratch on 16-frame 224x224 clips at batch 4 under bf16 autocast, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5701)
B, T = (1, 16) if SMALL else (4, 16)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.video.mvit_v2_s(num_classes=400).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clip = torch.randn(B, 3, T, 224, 224, device=device)
    label = torch.randint(0, 400, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(clip), label, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clip, label, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
