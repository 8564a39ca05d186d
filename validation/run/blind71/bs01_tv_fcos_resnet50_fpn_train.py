"""torchvision's FCOS with a ResNet-50 FPN backbone (no pretrained weights) trained on 4 images of
800x800 at batch 4 with 6 fixed boxes each, SGD with momentum, 2 steps; 3 phases."""

import os

import torch
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7101)
B, S = (2, 256) if SMALL else (4, 800)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.detection.fcos_resnet50_fpn(
    weights=None, weights_backbone=None, num_classes=91, min_size=S, max_size=S
).to(device)
model.train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
boxes = torch.tensor(
    [
        [10, 20, 200, 220],
        [300, 40, 500, 260],
        [50, 400, 250, 700],
        [420, 420, 760, 780],
        [600, 30, 790, 300],
        [5, 5, 60, 60],
    ],
    dtype=torch.float32,
) * (S / 800)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = [torch.rand(3, S, S, device=device) for _ in range(B)]
    targets = [{"boxes": boxes.to(device), "labels": torch.arange(1, 7, device=device)} for _ in range(B)]
    losses = model(images, targets)
    loss = sum(losses.values())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, losses, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
