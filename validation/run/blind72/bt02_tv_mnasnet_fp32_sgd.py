"""torchvision's MNASNet 1.0 (inverted residuals with depthwise 3x3 and 5x5 convolutions) trained in
fp32 on 224x224 images at batch 192, SGD with momentum, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7202)
B = 2 if SMALL else 192
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.mnasnet1_0().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, 224, 224, device=device)
    targets = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(model(images), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
