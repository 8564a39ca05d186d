"""torchvision fasterrcnn_mobilenet_v3_large_fpn (random weights, nothing downloaded) in eval under
no_grad: a batch of 4 images of 3 x 600 x 800 (resized by the model's transform to its 800-pixel
minimum), then a batch of 8 images of 3 x 480 x 640; 2 phases."""

import os

import torch
from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_fpn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2103)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None, num_classes=91)
model = model.to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
batches = [(2, 120, 160), (2, 96, 128)] if SMALL else [(4, 600, 800), (8, 480, 640)]
with torch.no_grad():
    for n, h, w in batches:
        images = [torch.rand(3, h, w, device=device) for _ in range(n)]
        out = model(images)
        assert len(out) == n
        del images, out
        if device == "cuda":
            print(
                f"batch {n} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
