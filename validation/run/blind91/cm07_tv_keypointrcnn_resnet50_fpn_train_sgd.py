"""torchvision Keypoint R-CNN (ResNet-50-FPN, 17 keypoints, 2 classes, random init) trained with
SGD momentum on batches of 4 images (min_size 512, max_size 768) with 3-6 person boxes each and
their keypoints; the RPN and ROI samplers draw their positive/negative samples with
torch.randperm on the GPU; 3 steps, then one evaluation batch (box NMS, keypoint heatmaps);
fp32; 5 phases."""

import os

import torch
from torchvision.models.detection import keypointrcnn_resnet50_fpn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9107)
B, MIN, MAX, IMG = (1, 128, 160, 160) if SMALL else (4, 512, 768, 640)
K = 17
device = "cuda" if torch.cuda.is_available() else "cpu"
model = keypointrcnn_resnet50_fpn(
    weights=None, weights_backbone=None, num_classes=2, num_keypoints=K, min_size=MIN, max_size=MAX
).to(device)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)


def make_batch():
    images, targets = [], []
    for _ in range(B):
        h, w = int(torch.randint(IMG * 3 // 4, IMG + 1, (1,))), IMG
        n = int(torch.randint(3, 7, (1,)))
        x0 = torch.rand(n) * (w * 0.6)
        y0 = torch.rand(n) * (h * 0.5)
        bw = 40 + torch.rand(n) * (w * 0.3)
        bh = 60 + torch.rand(n) * (h * 0.4)
        boxes = torch.stack([x0, y0, x0 + bw, y0 + bh], 1)
        kx = x0[:, None] + torch.rand(n, K) * bw[:, None]
        ky = y0[:, None] + torch.rand(n, K) * bh[:, None]
        vis = (torch.rand(n, K) > 0.2).float() * 2
        images.append(torch.rand(3, h, w, device=device))
        targets.append(
            {
                "boxes": boxes.to(device),
                "labels": torch.ones(n, dtype=torch.int64, device=device),
                "keypoints": torch.stack([kx, ky, vis], -1).to(device),
            }
        )
    return images, targets


model.train()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images, targets = make_batch()
    losses = model(images, targets)
    loss = sum(losses.values())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} kp {losses['loss_keypoint'].item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, targets, losses, loss
model.eval()
with torch.no_grad():
    images, _ = make_batch()
    dets = model(images)
    n_det = sum(d["boxes"].shape[0] for d in dets)
del images, dets
if device == "cuda":
    print(
        f"eval dets {n_det} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
