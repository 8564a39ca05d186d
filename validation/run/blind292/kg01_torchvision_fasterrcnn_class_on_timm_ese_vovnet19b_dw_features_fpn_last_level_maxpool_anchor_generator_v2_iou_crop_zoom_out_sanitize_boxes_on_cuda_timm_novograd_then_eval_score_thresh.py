"""Faster R-CNN assembled from parts, as detection code does when the backbone comes from timm: timm 1.0.29's
`ese_vovnet19b_dw` (`features_only=True, out_indices=(1, 2, 3, 4)`: strides 4..32 with 256/512/768/1024
channels) under torchvision's `FeaturePyramidNetwork` (256 channels, `LastLevelMaxPool` adding a fifth
level), torchvision's `FasterRCNN` class with its own `AnchorGenerator` (one size per level, three aspect
ratios), a `MultiScaleRoIAlign` over the four FPN maps, `min_size=512, max_size=640` and 10 classes.
Data (synthetic, seeded): images of 3 x 480 x 640 in [0, 1] with 3 to 6 boxes each, augmented one image at a
time on the GPU by torchvision.transforms.v2 on tv_tensors: `RandomZoomOut` (fill 0.5, side range 1..2,
p=0.5), `RandomIoUCrop` and `SanitizeBoundingBoxes` (which drops the boxes the crop left degenerate and
their labels), so images of many sizes reach the model's own `GeneralizedRCNNTransform`.
Phase 1: building the model and timm's `NovoGrad` (`create_optimizer_v2(model, "novograd", lr=1e-2,
weight_decay=1e-4)`). Phase 2: 6 fp32 training steps of 4 augmented images (the four Faster R-CNN losses
summed, `clip_grad_norm_` 10). Phase 3: `model.eval()` with `box_score_thresh=0.0` as built, under
`torch.no_grad()`, on 2 batches of 6 images of 480 x 640: the detections kept per image.
3 phases."""

from collections import OrderedDict

import timm
import torch
from timm.optim import create_optimizer_v2
from torch import nn
from torchvision import tv_tensors
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.ops import FeaturePyramidNetwork, MultiScaleRoIAlign
from torchvision.ops.feature_pyramid_network import LastLevelMaxPool
from torchvision.transforms import v2

torch.manual_seed(2921)
dev = "cuda"
H, W, NUM_CLASSES = 480, 640, 10


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class TimmFPN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = timm.create_model(
            "ese_vovnet19b_dw", pretrained=False, features_only=True, out_indices=(1, 2, 3, 4)
        )
        self.fpn = FeaturePyramidNetwork(
            self.body.feature_info.channels(), 256, extra_blocks=LastLevelMaxPool()
        )
        self.out_channels = 256

    def forward(self, x):
        feats = self.body(x)
        return self.fpn(OrderedDict((str(i), f) for i, f in enumerate(feats)))


anchors = AnchorGenerator(sizes=((32,), (64,), (128,), (256,), (512,)), aspect_ratios=((0.5, 1.0, 2.0),) * 5)
roi_pool = MultiScaleRoIAlign(featmap_names=["0", "1", "2", "3"], output_size=7, sampling_ratio=2)
model = FasterRCNN(
    TimmFPN(),
    num_classes=NUM_CLASSES,
    rpn_anchor_generator=anchors,
    box_roi_pool=roi_pool,
    min_size=512,
    max_size=640,
    box_score_thresh=0.0,
).to(dev)
optimizer = create_optimizer_v2(model, "novograd", lr=1e-2, weight_decay=1e-4)
augment = v2.Compose(
    [
        v2.RandomZoomOut(fill={tv_tensors.Image: 0.5, "others": 0}, side_range=(1.0, 2.0), p=0.5),
        v2.RandomIoUCrop(),
        v2.SanitizeBoundingBoxes(),
    ]
)
print("params", sum(p.numel() for p in model.parameters()))
report("fasterrcnn_timm_vovnet_fpn_build_novograd")


def sample():
    n = int(torch.randint(3, 7, ()))
    xy = torch.rand(n, 2, device=dev) * torch.tensor([W - 200.0, H - 200.0], device=dev)
    wh = 24.0 + torch.rand(n, 2, device=dev) * 170.0
    boxes = tv_tensors.BoundingBoxes(torch.cat([xy, xy + wh], 1), format="XYXY", canvas_size=(H, W))
    image = tv_tensors.Image(torch.rand(3, H, W, device=dev))
    labels = torch.randint(1, NUM_CLASSES, (n,), device=dev)
    image, target = augment(image, {"boxes": boxes, "labels": labels})
    return image, target


model.train()
sizes = []
for _step in range(6):
    images, targets = zip(*[sample() for _ in range(4)], strict=True)
    sizes.append(tuple(images[0].shape[-2:]))
    losses = model(list(images), list(targets))
    loss = sum(losses.values())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
print("train", {k: round(v.item(), 3) for k, v in losses.items()}, sizes)
report("fasterrcnn_train_fp32_v2_iou_crop_novograd")

del images, targets, losses, loss
model.eval()
kept = []
with torch.no_grad():
    for _rep in range(2):
        images = [torch.rand(3, H, W, device=dev) for _ in range(6)]
        detections = model(images)
        kept.append([int(d["boxes"].shape[0]) for d in detections])
print("eval detections", kept)
report("fasterrcnn_eval_no_grad")
