"""torchvision Faster R-CNN with a MobileNetV3-Large FPN backbone from random weights (weights=None,
weights_backbone=None, so every backbone layer trains, 91 classes), trained under bf16 autocast with
AdamW (foreach) and gradient-norm clipping, batch 8 of 600x900 images (the transform resizes them to
800x1200) with 1 to 8 boxes each; then evaluated under no_grad and bf16 autocast on 4 images at
two sizes (score threshold 0.0, 100 detections each); 5 phases."""

import os

import torch
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11102)
B, H, W, STEPS = (1, 160, 240, 1) if SMALL else (8, 600, 900, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"

model = fasterrcnn_mobilenet_v3_large_fpn(
    weights=None, weights_backbone=None, num_classes=91, box_score_thresh=0.0
).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, foreach=True)


def sample(n, h, w):
    images, targets = [], []
    for _ in range(n):
        images.append(torch.rand(3, h, w, device=device))
        k = int(torch.randint(1, 9, ()).item())
        xy = torch.rand(k, 2, device=device) * torch.tensor([w * 0.7, h * 0.7], device=device)
        wh = (torch.rand(k, 2, device=device) * 0.25 + 0.05) * torch.tensor([w, h], device=device)
        targets.append(
            {"boxes": torch.cat([xy, xy + wh], 1), "labels": torch.randint(1, 91, (k,), device=device)}
        )
    return images, targets


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    images, targets = sample(B, H, W)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        losses = model(images, targets)
        loss = sum(losses.values())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, targets, losses, loss
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    images = [torch.rand(3, H, W, device=device) for _ in range(2)]
    images += [torch.rand(3, W, H, device=device) for _ in range(2)]
    out = model(images)
    n = [len(o["boxes"]) for o in out]
if device == "cuda":
    print(f"eval {n} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
