"""Semantic segmentation training: torchvision's LR-ASPP with a MobileNetV3-Large backbone (no
weights), channels_last, bf16 autocast over fp32 weights, per-pixel cross entropy with an ignore
index, SGD with momentum and weight decay, batch 8 at 320x320, 21 classes, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import lraspp_mobilenet_v3_large

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3702)
B, H = (2, 64) if SMALL else (8, 320)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21)
model = model.to(device).to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, H, H, device=device).to(memory_format=torch.channels_last)
    target = torch.randint(0, 21, (B, H, H), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(x)["out"]
        loss = F.cross_entropy(out, target, ignore_index=255)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, target, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
