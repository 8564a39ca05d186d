"""Semantic segmentation training with torchvision's DeepLabV3-ResNet50 (no weights; dilated last
stages, ASPP, auxiliary FCN head) under bf16 autocast over fp32 weights, cross entropy on both
heads, SGD with momentum, batch 4 at 512x512, 21 classes, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import deeplabv3_resnet50

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4102)
B, H = (2, 64) if SMALL else (4, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=21, aux_loss=True).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, H, H, device=device)
    target = torch.randint(0, 21, (B, H, H), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(x)
        loss = F.cross_entropy(out["out"], target) + 0.4 * F.cross_entropy(out["aux"], target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, target, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
