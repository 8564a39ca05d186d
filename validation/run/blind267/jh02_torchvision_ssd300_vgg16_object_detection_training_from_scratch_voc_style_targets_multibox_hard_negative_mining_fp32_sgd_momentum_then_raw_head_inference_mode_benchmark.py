"""Single-shot detection from scratch with torchvision's SSD300 on a VGG-16 backbone
(`ssd300_vgg16(weights=None, weights_backbone=None, num_classes=21)`, Pascal-VOC style), fp32.
Phase 1: 6 SGD steps (momentum 0.9, weight decay 5e-4, lr 1e-3) at batch 24: a list of 24 images of
3 x 375 x 500 (the model's transform resizes them to 300 x 300 and normalizes), each with 3
ground-truth boxes and labels built on the host from a seeded generator, so the matcher's
foreground anchors are fixed by the boxes; the loss is SSD's multibox loss (smooth-L1 over the
matched of the 8,732 default boxes, cross entropy with 3:1 hard negative mining by a double sort).
Phase 2: the trained model in eval mode run as a raw detector under `torch.inference_mode()`:
`model.backbone` over a normalized batch of 64 x 3 x 300 x 300 and `model.head` over its six
feature maps (bbox regression (64, 8732, 4) and class logits (64, 8732, 21)), three times, as a
throughput benchmark does before post-processing (no score threshold, so no value-dependent size).
2 phases."""

import torch
from torchvision.models.detection import ssd300_vgg16

torch.manual_seed(2672)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def voc_targets(n, gen):
    targets = []
    for _ in range(n):
        xy = torch.rand(3, 2, generator=gen) * torch.tensor([300.0, 220.0])
        wh = 40.0 + torch.rand(3, 2, generator=gen) * 150.0
        boxes = torch.cat([xy, xy + wh], 1)
        labels = torch.randint(1, 21, (3,), generator=gen)
        targets.append({"boxes": boxes.to(dev), "labels": labels.to(dev)})
    return targets


model = ssd300_vgg16(weights=None, weights_backbone=None, num_classes=21).to(dev)
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9, weight_decay=5e-4)
gen = torch.Generator().manual_seed(7)
model.train()
for _step in range(6):
    images = list(torch.rand(24, 3, 375, 500, device=dev))
    losses = model(images, voc_targets(24, gen))
    loss = losses["bbox_regression"] + losses["classification"]
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("train", {k: round(v.item(), 3) for k, v in losses.items()})
report("ssd300_vgg16_train_fp32_sgd")

del images, losses, loss
model.eval()
mean = torch.tensor([0.48235, 0.45882, 0.40784], device=dev).view(1, 3, 1, 1)
std = torch.tensor([1.0 / 255.0] * 3, device=dev).view(1, 3, 1, 1)
with torch.inference_mode():
    for _rep in range(3):
        x = (torch.rand(64, 3, 300, 300, device=dev) - mean) / std
        feats = model.backbone(x)
        head = model.head(list(feats.values()))
    print("heads", {k: tuple(v.shape) for k, v in head.items()})
report("ssd300_raw_backbone_and_head_inference_mode")
