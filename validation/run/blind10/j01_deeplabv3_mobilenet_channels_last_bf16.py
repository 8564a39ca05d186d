"""torchvision DeepLabV3 with a MobileNetV3-Large backbone (dilated depthwise convolutions, ASPP, aux head off),
channels_last, bf16 autocast, 21 classes, cross-entropy with ignore_index=255 over bilinear-upsampled logits,
SGD momentum 0.9 with weight decay, batch 8 at 512x512, 3 steps."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SIZE = (2, 64) if SMALL else (8, 512)
torch.manual_seed(1001)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21, aux_loss=False)
model = model.to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.randn(BATCH, 3, SIZE, SIZE, device=device).contiguous(memory_format=torch.channels_last)
    target = torch.randint(0, 21, (BATCH, SIZE, SIZE), device=device)
    target[:, :8] = 255
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(images)["out"]
        loss = F.cross_entropy(out, target, ignore_index=255)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
