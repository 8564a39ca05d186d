"""torchvision RetinaNet v2 (ResNet-50 FPN v2, GroupNorm classification and regression heads, GIoU box
loss) from random weights (weights=None, weights_backbone=None, 21 classes, images resized to
640..832), trained in fp32 with SGD (momentum, nesterov) over 2 accumulated micro-batches of 4 images
at 512x640 with 1 to 5 boxes each, a cosine schedule; then evaluated under inference_mode on 2
images (score threshold 0.05, top 1000 candidates per level before NMS); 4 phases."""

import os

import torch
from torchvision.models.detection import retinanet_resnet50_fpn_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11103)
B, H, W, MIN, MAX, STEPS, ACCUM = (1, 128, 160, 128, 160, 1, 1) if SMALL else (4, 512, 640, 640, 832, 2, 2)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = retinanet_resnet50_fpn_v2(
    weights=None, weights_backbone=None, num_classes=21, min_size=MIN, max_size=MAX, score_thresh=0.05
).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)


def sample(n):
    images, targets = [], []
    for _ in range(n):
        images.append(torch.rand(3, H, W, device=device))
        k = int(torch.randint(1, 6, ()).item())
        c = torch.rand(k, 2) * torch.tensor([W, H])
        half = (torch.rand(k, 2) * 0.2 + 0.04) * torch.tensor([W, H])
        boxes = torch.cat([c - half, c + half], 1).clamp(min=0)
        boxes[:, 2::2] = boxes[:, 2::2].clamp(max=W)
        boxes[:, 3::2] = boxes[:, 3::2].clamp(max=H)
        targets.append({"boxes": boxes.to(device), "labels": torch.randint(1, 21, (k,)).to(device)})
    return images, targets


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    for _ in range(ACCUM):
        images, targets = sample(B)
        losses = model(images, targets)
        loss = sum(losses.values()) / ACCUM
        loss.backward()
        del images, targets, losses
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.inference_mode():
    images, _ = sample(2)
    out = model(images)
    n = [len(o["boxes"]) for o in out]
if device == "cuda":
    print(f"eval {n} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
