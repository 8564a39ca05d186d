"""timm's ResNetV2-50x1 BiT (resnetv2_50x1_bit: weight-standardised convolutions, GroupNorm with 32
groups, pre-activation blocks) trained under bf16 autocast on 224x224 images at batch 48, SGD with
momentum, 2 steps; 3 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6702)
B, S = (2, 64) if SMALL else (48, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("resnetv2_50x1_bit", num_classes=1000).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.03, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device)
    targets = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(model(images), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
