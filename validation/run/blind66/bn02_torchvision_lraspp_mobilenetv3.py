"""torchvision's LR-ASPP with a MobileNetV3-Large backbone (lraspp_mobilenet_v3_large: hardswish,
squeeze-excitation, a low-resolution and a high-resolution branch) trained for 21-class
segmentation on 512x512 crops at batch 16, fp32, SGD, 2 steps, then evaluated on one batch under
no_grad; 4 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6602)
B, S = (2, 64) if SMALL else (16, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(num_classes=21, weights_backbone=None).to(
    device
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device)
    labels = torch.randint(0, 21, (B, S, S), device=device)
    loss = F.cross_entropy(model(images)["out"], labels, ignore_index=255)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    out = model(torch.randn(B, 3, S, S, device=device))["out"]
del out
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
