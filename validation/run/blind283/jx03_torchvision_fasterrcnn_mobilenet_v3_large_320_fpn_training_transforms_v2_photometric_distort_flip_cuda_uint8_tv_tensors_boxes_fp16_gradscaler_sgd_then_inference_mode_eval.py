"""Low-resolution mobile detector training as torchvision 0.26's detection reference composes it, on
`torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(weights=None,
weights_backbone=None, num_classes=21)` (MobileNetV3-Large FPN backbone, the model's own transform
resizing to 320 pixels on the short side, max 640). The data pipeline runs `torchvision.transforms.v2`
per sample on CUDA: uint8 images of 3 x 480 x 640 made on the host (as a decoder would) with
`tv_tensors.BoundingBoxes` (8 boxes each, XYXY, from a seeded host generator), both moved to the GPU,
through `v2.RandomPhotometricDistort(p=1.0)` (brightness, contrast, saturation, hue on HSV, channel
permutation), `v2.RandomHorizontalFlip()` (boxes flipped with the image) and
`v2.ToDtype(torch.float32, scale=True)`. Phase 1: 6 steps at 16 images of fp16 autocast with
`torch.amp.GradScaler`, SGD (momentum 0.9, weight decay 4e-5, lr 0.02) over the four losses. Phase 2:
`model.eval()` under `torch.inference_mode()` on 32 images of 3 x 480 x 640 (post-processed boxes,
scores and labels, box_score_thresh 0.05, at most 100 per image), twice. Seeded. 2 phases."""

import torch
from torchvision import tv_tensors
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn
from torchvision.transforms import v2

torch.manual_seed(2833)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def sample(gen):
    # a dataset's item: decoded on the host, boxes from its annotation, then moved to the GPU
    img = torch.randint(0, 256, (3, 480, 640), dtype=torch.uint8, generator=gen)
    xy = torch.rand(8, 2, generator=gen) * torch.tensor([500.0, 340.0])
    wh = 40.0 + torch.rand(8, 2, generator=gen) * 100.0
    boxes = torch.cat([xy, xy + wh], 1).to(dev)
    boxes = tv_tensors.BoundingBoxes(boxes, format="XYXY", canvas_size=(480, 640))
    labels = torch.randint(1, 21, (8,), generator=gen).to(dev)
    return img.to(dev), {"boxes": boxes, "labels": labels}


augment = v2.Compose(
    [v2.RandomPhotometricDistort(p=1.0), v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True)]
)
model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None, num_classes=21).to(dev)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=4e-5)
scaler = torch.amp.GradScaler("cuda")
gen = torch.Generator().manual_seed(2833)

model.train()
for _step in range(6):
    images, targets = [], []
    for _i in range(16):
        img, tgt = augment(*sample(gen))
        images.append(img)
        targets.append(tgt)
    with torch.autocast("cuda", dtype=torch.float16):
        losses = model(images, targets)
        loss = sum(losses.values())
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
print("train", {k: round(v.item(), 3) for k, v in losses.items()})
report("fasterrcnn_mnv3_320_fpn_v2_cuda_aug_fp16_scaler_sgd")

del images, targets, losses, loss
model.eval()
with torch.inference_mode():
    for _rep in range(2):
        images = [torch.rand(3, 480, 640, device=dev) for _ in range(32)]
        dets = model(images)
        print("eval", sum(d["boxes"].shape[0] for d in dets))
        del images, dets
report("fasterrcnn_eval_inference_mode")
