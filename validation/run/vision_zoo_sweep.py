"""Every timm architecture and torchvision model on the simulated GPU: a crash finder (`zoo.py`'s loop).
Each model is built with random weights on the CPU and run in training mode on a batch of 2 at its own
input size (timm's `pretrained_cfg["input_size"]`; torchvision's classification, segmentation, video,
optical-flow and detection inputs, detection with its training targets); then moved to "cuda" and run
forward and backward there. Models of more than `MAX_PARAMS` parameters (counted on the meta device)
and torchvision's quantized models (CPU kernels only) are left out. Run it under the twin, no GPU needed:

    python -m vramscope run validation/run/vision_zoo_sweep.py OUT.jsonl [timm/NAME | torchvision/NAME ...]
    bash validation/run/zoo_sweep.sh validation/run/vision_zoo_sweep.py OUT.jsonl     (all, in chunks)
"""

import os
import sys
import warnings

import timm
import torch
from torchvision import models as tvm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import sweep

warnings.simplefilter("ignore")

#: the largest model built (parameters): a bound on the CPU side's time and memory
MAX_PARAMS = 150_000_000
BATCH = 2
#: timm models swept per module of timm.models
PER_MODULE = 2


def _checked(make):
    """The model `make` builds, unless it has more than MAX_PARAMS parameters (counted on the meta
    device where its construction allows: torchvision's RegNets copy tensors while they are built,
    timm's Gemma 4 ViT reads a value)."""
    try:
        with torch.device("meta"):
            n = sum(p.numel() for p in make().parameters())
    except (NotImplementedError, RuntimeError):
        model = make()
        n = sum(p.numel() for p in model.parameters())
    else:
        model = None
    if n > MAX_PARAMS:
        raise ValueError(f"{n:,} parameters, over MAX_PARAMS")
    return model if model is not None else make()


def _detection_targets(name):
    targets = []
    for _ in range(BATCH):
        boxes = torch.tensor([[10.0, 20.0, 120.0, 150.0], [60.0, 40.0, 200.0, 210.0]])
        t = {"boxes": boxes, "labels": torch.tensor([1, 3])}
        if name.startswith("maskrcnn"):
            t["masks"] = torch.zeros(2, 224, 224, dtype=torch.uint8)
            t["masks"][:, 30:140, 30:140] = 1
        if name.startswith("keypointrcnn"):
            t["keypoints"] = torch.cat([torch.rand(2, 17, 2) * 100 + 20, torch.ones(2, 17, 1)], dim=2)
        targets.append(t)
    return targets


def build(name):
    zoo, arch = name.split("/", 1)
    if zoo == "timm":
        model = _checked(lambda: timm.create_model(arch, pretrained=False))
        c, h, w = model.pretrained_cfg.get("input_size", (3, 224, 224))
        return model, (torch.randn(BATCH, c, h, w),)
    backbone = arch in tvm.list_models(module=tvm.detection) or arch in tvm.list_models(
        module=tvm.segmentation
    )
    extra = {"weights_backbone": None} if backbone else {}
    model = _checked(lambda: tvm.get_model(arch, weights=None, **extra))
    if arch in tvm.list_models(module=tvm.detection):
        images = list(torch.rand(BATCH, 3, 224, 224).unbind(0))
        return model, (images, _detection_targets(arch))
    if arch in tvm.list_models(module=tvm.video):
        size = 224 if arch.startswith(("mvit", "swin3d", "s3d")) else 112
        frames = 16 if arch.startswith(("mvit", "s3d")) else 8
        return model, (torch.randn(BATCH, 3, frames, size, size),)
    if arch in tvm.list_models(module=tvm.optical_flow):
        return model, (torch.randn(BATCH, 3, 128, 128), torch.randn(BATCH, 3, 128, 128))
    size = 299 if arch == "inception_v3" else 224
    return model, (torch.randn(BATCH, 3, size, size),)


def names():
    """torchvision's models but the quantized ones, and up to `PER_MODULE` of each timm module's (spread
    over its sorted names: a module's variants differ mostly in size)."""
    quantized = set(tvm.list_models(module=tvm.quantization))
    tv = [f"torchvision/{n}" for n in tvm.list_models() if n not in quantized]
    by_module = {}
    for n in timm.list_models():
        by_module.setdefault(timm.models.get_arch_name(n) and _module(n), []).append(n)
    picked = []
    for members in by_module.values():
        step = max(1, len(members) // PER_MODULE)
        picked += members[::step][:PER_MODULE]
    return tv + [f"timm/{n}" for n in sorted(picked)]


def _module(name):
    return timm.models.model_entrypoint(name).__module__


if __name__ == "__main__":
    only = set(sys.argv[2:])
    sweep([n for n in names() if not only or n in only], build, sys.argv[1], "vision_zoo_sweep")
