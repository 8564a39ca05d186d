"""torchvision's semantic-segmentation reference recipe (references/segmentation/train.py) on
FCN-ResNet101 with its auxiliary head (`fcn_resnet101(weights=None, weights_backbone=None,
num_classes=21, aux_loss=True)`: a dilated ResNet-101, output stride 8, FCN heads on layer4 and
layer3), VOC-style: uint8 image batches and uint8 masks (255 = ignore) made on the GPU, augmented
there with `torchvision.transforms.v2` on `tv_tensors.Image` / `tv_tensors.Mask` batches
(RandomResizedCrop to 480 x 480 with the mask resized nearest, RandomHorizontalFlip, ToDtype with
scale, Normalize); the loss is cross-entropy with ignore_index=255 on "out" plus 0.5 x on "aux".
Model and inputs channels-last, fp16 autocast with `torch.amp.GradScaler`, SGD (momentum 0.9,
weight decay 1e-4, lr 0.02) under `PolynomialLR(power=0.9)` stepped per iteration. Phase 1: 6 steps
at batch 12. Phase 2: evaluation under `torch.inference_mode()` and fp16 autocast at 520 x 520,
batch 8, the aux head dropped (`model.aux_classifier = None`, as the reference evaluates), the
confusion matrix accumulated with a fixed-size `bincount` (ignored pixels sent to an extra bin),
mean IoU printed. Seeded. 2 phases."""

import torch
import torchvision
from torchvision import tv_tensors
from torchvision.models.segmentation import fcn_resnet101
from torchvision.transforms import v2

torch.manual_seed(2741)
dev = "cuda"
NUM_CLASSES = 21


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def voc_like_batch(n, h, w):
    img = torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, device=dev)
    mask = torch.randint(0, NUM_CLASSES, (n, 1, h, w), dtype=torch.uint8, device=dev)
    mask[:, :, :8] = 255  # a border the loss ignores
    return tv_tensors.Image(img), tv_tensors.Mask(mask)


train_tf = v2.Compose(
    [
        v2.RandomResizedCrop((480, 480), scale=(0.5, 1.0), antialias=True),
        v2.RandomHorizontalFlip(0.5),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)
eval_tf = v2.Compose(
    [
        v2.Resize((520, 520), antialias=True),
        v2.ToDtype({tv_tensors.Image: torch.float32, "others": None}, scale=True),
        v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ]
)

model = fcn_resnet101(weights=None, weights_backbone=None, num_classes=NUM_CLASSES, aux_loss=True)
model = model.to(dev).to(memory_format=torch.channels_last)
params = [
    {"params": [p for p in model.backbone.parameters() if p.requires_grad]},
    {"params": [p for p in model.classifier.parameters() if p.requires_grad]},
    {"params": [p for p in model.aux_classifier.parameters() if p.requires_grad], "lr": 0.2},
]
optimizer = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4)
steps = 6
lr_scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=steps, power=0.9)
scaler = torch.amp.GradScaler("cuda")
criterion = torch.nn.CrossEntropyLoss(ignore_index=255)

model.train()
for _step in range(steps):
    img, mask = voc_like_batch(12, 500, 500)
    img, mask = train_tf(img, mask)
    img = img.contiguous(memory_format=torch.channels_last)
    target = mask.as_subclass(torch.Tensor).squeeze(1).long()
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(img)
        loss = criterion(out["out"], target) + 0.5 * criterion(out["aux"], target)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    lr_scheduler.step()
print("train", torchvision.__version__, round(loss.item(), 3), round(lr_scheduler.get_last_lr()[0], 6))
report("fcn_resnet101_aux_fp16_gradscaler_channels_last")

del img, mask, target, out, loss
model.aux_classifier = None
model.eval()
conf = torch.zeros(NUM_CLASSES * NUM_CLASSES, dtype=torch.int64, device=dev)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    for _b in range(3):
        img, mask = voc_like_batch(8, 375, 500)
        img, mask = eval_tf(img, mask)
        img = img.contiguous(memory_format=torch.channels_last)
        target = mask.as_subclass(torch.Tensor).squeeze(1).long()
        pred = model(img)["out"].argmax(1)
        valid = target < NUM_CLASSES
        idx = torch.where(valid, NUM_CLASSES * target + pred, NUM_CLASSES * NUM_CLASSES)
        conf += torch.bincount(idx.flatten(), minlength=NUM_CLASSES * NUM_CLASSES + 1)[:-1]
h = conf.view(NUM_CLASSES, NUM_CLASSES).double()
iou = h.diag() / (h.sum(0) + h.sum(1) - h.diag()).clamp(min=1)
print("eval miou", round(iou.mean().item(), 4))
report("fcn_resnet101_inference_mode_fp16_confusion_matrix")
