"""Probe (session 67, helper kg) for blind292/kg01's miss: are kg01's augmented image sizes the GPU's when
nothing value-dependent draws from the CUDA generator between them? kg01's first image matched the H100
((228, 385)) and its later ones did not; torchvision's `BalancedPositiveNegativeSampler` draws
`torch.randperm(n)` on the device, whose philox offset grows with n (Randperm.cu), and n (the RoI heads'
positive / negative proposals) depends on the model's outputs, which the twin does not carry.
Line `aug`: kg01's seed, its model built as kg01 builds it (on the host here: the same host draws, none on
the device) and its `sample()` (v2 RandomZoomOut, RandomIoUCrop, SanitizeBoundingBoxes on CUDA tv_tensors)
run 24 times with no forward between: each image's size and box count (the first four are kg01's step 0).
Lines `perm N`: `torch.rand(3)` after `torch.randperm(N)` on the device from seed 7: the offset each N takes.
Plain python3 on the GPU (< 5 s, < 1 GB); the twin runs it as `vramscope run --gpu h100 --quiet`."""

from collections import OrderedDict

import timm
import torch
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
        return self.fpn(OrderedDict((str(i), f) for i, f in enumerate(self.body(x))))


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
)
augment = v2.Compose(
    [
        v2.RandomZoomOut(fill={tv_tensors.Image: 0.5, "others": 0}, side_range=(1.0, 2.0), p=0.5),
        v2.RandomIoUCrop(),
        v2.SanitizeBoundingBoxes(),
    ]
)


def sample():
    n = int(torch.randint(3, 7, ()))
    xy = torch.rand(n, 2, device=dev) * torch.tensor([W - 200.0, H - 200.0], device=dev)
    wh = 24.0 + torch.rand(n, 2, device=dev) * 170.0
    boxes = tv_tensors.BoundingBoxes(torch.cat([xy, xy + wh], 1), format="XYXY", canvas_size=(H, W))
    image = tv_tensors.Image(torch.rand(3, H, W, device=dev))
    labels = torch.randint(1, NUM_CLASSES, (n,), device=dev)
    image, target = augment(image, {"boxes": boxes, "labels": labels})
    return image, target


out = []
for _ in range(24):
    image, target = sample()
    out.append(f"{image.shape[-2]}x{image.shape[-1]}/{target['boxes'].shape[0]}")
print("aug", " ".join(out))
for n in (1, 100, 511, 512, 2000, 5000):
    torch.manual_seed(7)
    torch.randperm(n, device=dev)
    print(f"perm {n}", " ".join(f"{v:.6f}" for v in torch.rand(3, device=dev).tolist()))
