"""torchvision's SSDlite320 detector (MobileNetV3-Large backbone, separable SSD heads, 21 classes)
built without pretrained weights, trained in fp32 on 24 synthetic 320 x 320 images with 1-4 boxes
each through its own anchor matching and hard-negative mining, fused SGD (momentum 0.9, weight
decay 4e-5) with a cosine schedule, 3 steps, then inference with its NMS post-processing on 16
images; 5 phases."""

import os

import torch
from torchvision.models.detection import ssdlite320_mobilenet_v3_large

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9007)
B, EB = (2, 2) if SMALL else (24, 16)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.015, momentum=0.9, weight_decay=4e-5, fused=device == "cuda")
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)


def targets(n):
    out = []
    for _ in range(n):
        k = int(torch.randint(1, 5, ()))
        xy = torch.rand(k, 2) * 240
        wh = torch.rand(k, 2) * 70 + 10
        boxes = torch.cat([xy, xy + wh], dim=1).to(device)
        out.append({"boxes": boxes, "labels": torch.randint(1, 21, (k,), device=device)})
    return out


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    images = list(torch.rand(B, 3, 320, 320, device=device))
    losses = model(images, targets(B))
    loss = losses["bbox_regression"] + losses["classification"]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, losses, loss
model.eval()
with torch.no_grad():
    dets = model(list(torch.rand(EB, 3, 320, 320, device=device)))
if device == "cuda":
    print(
        f"eval {sum(len(d['boxes']) for d in dets)} boxes peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
