"""torchvision `deeplabv3_resnet50(weights=None, weights_backbone=None, aux_loss=True)` semantic
segmentation training, VOC-style (21 classes, ignore index 255 on a border band), fp32 at batch 8 x 512 x 512:
main + 0.5 * auxiliary FCN-head cross entropy, SGD momentum with a polynomial LR schedule and separate
backbone / head parameter groups, 3 steps; then `no_grad` eval producing argmax masks."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import deeplabv3_resnet50

B, H, W, CLASSES = (2, 64, 64, 21) if os.environ.get("SMOKE") else (8, 512, 512, 21)
IGNORE = 255
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(508)

model = deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=CLASSES, aux_loss=True).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
params = [
    {"params": [p for p in model.backbone.parameters() if p.requires_grad]},
    {"params": [p for p in model.classifier.parameters() if p.requires_grad]},
    {"params": [p for p in model.aux_classifier.parameters() if p.requires_grad], "lr": 0.1},
]
optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
iters = 30000
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda x: (1 - x / iters) ** 0.9)


def criterion(outputs, target):
    losses = {name: F.cross_entropy(x, target, ignore_index=IGNORE) for name, x in outputs.items()}
    return losses["out"] + 0.5 * losses["aux"]


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    image = torch.randn(B, 3, H, W, device=device)
    target = torch.randint(0, CLASSES, (B, H, W), device=device)
    target[:, :8, :] = IGNORE
    target[:, :, -8:] = IGNORE
    output = model(image)
    loss = criterion(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
hist = torch.zeros(CLASSES, CLASSES, dtype=torch.int64, device=device)
with torch.no_grad():
    for _ in range(2):
        image = torch.randn(B, 3, H, W, device=device)
        target = torch.randint(0, CLASSES, (B, H, W), device=device)
        pred = model(image)["out"].argmax(1)
        hist += torch.bincount(CLASSES * target.flatten() + pred.flatten(), minlength=CLASSES**2).view(
            CLASSES, CLASSES
        )
iou = hist.diag() / (hist.sum(0) + hist.sum(1) - hist.diag()).clamp(min=1)
print(f"mIoU {iou.mean().item():.4f}")
if device == "cuda":
    print(
        f"eval peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
