"""A Faster R-CNN assembled by hand from torchvision parts, as the "custom backbone" section of the
torchvision detection tutorial does: ``backbone_utils.mobilenet_backbone('mobilenet_v3_large',
fpn=True, trainable_layers=3)`` (frozen BN, FPN over the last two stages plus a max-pool level, 256
channels), an ``AnchorGenerator`` with five sizes and three ratios on each of the three levels, and a
``MultiScaleRoIAlign`` box pooler over levels '0' and '1', for 21 classes, images resized to 512..853 by
the model's own transform. The training data are synthetic images of varying sizes with random
boxes, augmented on the CPU by torchvision.transforms.v2 on tv_tensors (RandomPhotometricDistort,
RandomHorizontalFlip, RandomZoomOut, SanitizeBoundingBoxes) and moved to the GPU per image. fp16
autocast with GradScaler, SGD with momentum, gradient clipping after unscale.

Phases: 0 model and optimizer; 1 three training steps of 6 images; 2 eval on 8 images under
no_grad (detections per image); 3 the same images with score_thresh 0.0 and 300 detections per image
under inference_mode."""

import torch
import torchvision.transforms.v2 as T
from torchvision import tv_tensors
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.backbone_utils import mobilenet_backbone
from torchvision.ops import MultiScaleRoIAlign

torch.manual_seed(3153)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 21


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


backbone = mobilenet_backbone(backbone_name="mobilenet_v3_large", weights=None, fpn=True, trainable_layers=3)
anchors = AnchorGenerator(sizes=((32, 64, 128, 256, 512),) * 3, aspect_ratios=((0.5, 1.0, 2.0),) * 3)
pooler = MultiScaleRoIAlign(featmap_names=["0", "1"], output_size=7, sampling_ratio=2)
model = FasterRCNN(
    backbone,
    num_classes=NUM_CLASSES,
    rpn_anchor_generator=anchors,
    box_roi_pool=pooler,
    min_size=512,
    max_size=853,
    rpn_batch_size_per_image=256,
    box_batch_size_per_image=256,
).to(device)
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.SGD(params, lr=0.02, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
augment = T.Compose(
    [
        T.RandomPhotometricDistort(p=1.0),
        T.RandomZoomOut(fill={tv_tensors.Image: (123, 117, 104), "others": 0}, side_range=(1.0, 1.5), p=0.5),
        T.RandomHorizontalFlip(p=0.5),
        T.ToDtype(torch.float32, scale=True),
        T.SanitizeBoundingBoxes(),
    ]
)
report("model")


def sample(h, w, n):
    img = tv_tensors.Image(torch.randint(0, 256, (3, h, w), dtype=torch.uint8))
    xy = torch.rand(n, 2) * torch.tensor([w * 0.7, h * 0.7])
    wh = 16 + torch.rand(n, 2) * torch.tensor([w * 0.3, h * 0.3])
    boxes = tv_tensors.BoundingBoxes(torch.cat([xy, xy + wh], 1), format="XYXY", canvas_size=(h, w))
    target = {"boxes": boxes, "labels": torch.randint(1, NUM_CLASSES, (n,))}
    img, target = augment(img, target)
    return img.to(device), {k: v.to(device) for k, v in target.items()}


SIZES = [(480, 640), (600, 800), (512, 512), (640, 480), (375, 500), (720, 960)]
model.train()
for step in range(3):
    batch = [sample(h, w, 3 + i) for i, (h, w) in enumerate(SIZES)]
    images, targets = [b[0] for b in batch], [b[1] for b in batch]
    with torch.autocast(device, dtype=torch.float16):
        losses = model(images, targets)
    loss = sum(losses.values())
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 10.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} " + " ".join(f"{k} {v.item():.4f}" for k, v in losses.items()))
    del batch, images, targets, losses, loss
report("train")

model.eval()
images = [torch.rand(3, 400 + 40 * i, 600 - 20 * i, device=device) for i in range(8)]
with torch.no_grad():
    dets = model(images)
if device == "cuda":
    print("eval dets " + " ".join(str(d["boxes"].shape[0]) for d in dets))
del dets
report("eval")

model.roi_heads.score_thresh = 0.0
model.roi_heads.detections_per_img = 300
with torch.inference_mode():
    dets = model(images)
if device == "cuda":
    print("sweep dets " + " ".join(str(d["boxes"].shape[0]) for d in dets))
report("sweep")
