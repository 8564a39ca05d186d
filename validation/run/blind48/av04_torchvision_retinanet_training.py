"""torchvision's RetinaNet (ResNet-50 FPN, no pretrained weights) trained on synthetic boxes: 4
images of 640 x 640 with 6 boxes each, the anchor matcher, focal loss and GIoU-free L1 box loss of
`retinanet_resnet50_fpn(...)(images, targets)`, fp32, SGD momentum, 2 steps; 3 phases."""

import os

import torch
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4804)
B, IMG, NB = (1, 128, 2) if SMALL else (4, 640, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.detection.retinanet_resnet50_fpn(
    weights=None, weights_backbone=None, num_classes=91, min_size=IMG, max_size=IMG
).to(device)
model.train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = [torch.rand(3, IMG, IMG, device=device) for _ in range(B)]
    targets = []
    for _ in range(B):
        xy = torch.rand(NB, 2, device=device) * IMG * 0.6
        wh = torch.rand(NB, 2, device=device) * IMG * 0.3 + 16
        targets.append(
            {"boxes": torch.cat([xy, xy + wh], 1), "labels": torch.randint(1, 91, (NB,), device=device)}
        )
    losses = model(images, targets)
    loss = sum(losses.values())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, targets, losses, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
