"""Probe (session 67, helper kg) for blind292/kg01's phase-2 reserved miss (+304,087,040 on the H100 after
kg01's training, whose image sizes the twin cannot follow: see kg67_iou_crop_rng_probe.py): kg01 exactly as
written but without its training phase, so its no_grad eval (2 batches of 6 images of 480 x 640) starts from
the built model only. Its `fasterrcnn_eval_no_grad` line decides whether the eval's reserved is the twin's
when the cache before it is known; twin lines in kg67_kg01_eval_only_probe_twin_h100.out.
Plain python3 on the GPU (< 15 s, < 6 GB)."""

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


model.eval()
kept = []
with torch.no_grad():
    for _rep in range(2):
        images = [torch.rand(3, H, W, device=dev) for _ in range(6)]
        detections = model(images)
        kept.append([int(d["boxes"].shape[0]) for d in detections])
print("eval detections", kept)
report("fasterrcnn_eval_no_grad")
