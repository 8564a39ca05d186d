"""torchvision Mask R-CNN v2 (ResNet-50 FPN v2 with BatchNorm heads, 4-conv mask head) built from random
weights (weights=None, weights_backbone=None, 21 classes, images resized to 512..704), trained in fp32
with SGD (momentum, weight decay) and a linear warm-up, batch 4 of 480x640 images with 2 to 6 boxes and
their binary masks each; then evaluated on 3 images under inference_mode (score threshold 0.0 so the
random heads keep their 100 detections and paste their masks); 5 phases."""

import os

import torch
from torchvision.models.detection import maskrcnn_resnet50_fpn_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11101)
B, H, W, MIN, MAX, STEPS = (1, 160, 224, 160, 224, 1) if SMALL else (4, 480, 640, 512, 704, 3)
NCLS = 21
device = "cuda" if torch.cuda.is_available() else "cpu"

model = maskrcnn_resnet50_fpn_v2(
    weights=None, weights_backbone=None, num_classes=NCLS, min_size=MIN, max_size=MAX, box_score_thresh=0.0
).to(device)
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4)
warmup = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.001, total_iters=STEPS)


def sample(n):
    images, targets = [], []
    for _ in range(n):
        images.append(torch.rand(3, H, W, device=device))
        k = int(torch.randint(2, 7, ()).item())
        xy = torch.rand(k, 2) * torch.tensor([W * 0.6, H * 0.6])
        wh = (torch.rand(k, 2) * 0.35 + 0.05) * torch.tensor([W, H])
        boxes = torch.cat([xy, xy + wh], 1)
        masks = torch.zeros(k, H, W, dtype=torch.uint8)
        for j, (x0, y0, x1, y1) in enumerate(boxes.round().int().tolist()):
            masks[j, y0:y1, x0:x1] = 1
        targets.append(
            {
                "boxes": boxes.to(device),
                "labels": torch.randint(1, NCLS, (k,)).to(device),
                "masks": masks.to(device),
            }
        )
    return images, targets


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    images, targets = sample(B)
    losses = model(images, targets)
    loss = sum(losses.values())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    warmup.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} mask {losses['loss_mask'].item():.3f} "
            f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, targets, losses, loss
model.eval()
with torch.inference_mode():
    images, _ = sample(3)
    out = model(images)
    n = [len(o["boxes"]) for o in out]
    masks = [tuple(o["masks"].shape) for o in out]
if device == "cuda":
    print(
        f"eval {n} {masks} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
