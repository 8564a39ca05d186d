"""HF BeitForSemanticSegmentation (BEiT-B/16 with relative position bias, UperNet decode head and
FCN auxiliary head, 150 classes) built from its config in fp16 weights: sliding-window inference
as segmentation toolboxes do it, 512x512 crops at stride 341 over two 1024x2048 street images
(crops batched by 6, logits upsampled and summed into a full-size map, divided by the count),
then one 512x512 image with horizontal-flip test-time augmentation; 2 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import BeitConfig, BeitForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8802)
if SMALL:
    config = BeitConfig(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=64,
        patch_size=16,
        out_indices=[1, 2, 3, 4],
        pool_scales=[1, 2],
        auxiliary_channels=16,
        use_relative_position_bias=True,
        num_labels=5,
    )
    H, W, CROP, STRIDE, B = 96, 160, 64, 43, 6
else:
    config = BeitConfig(
        image_size=512,
        out_indices=[3, 5, 7, 11],
        use_relative_position_bias=True,
        num_labels=150,
    )
    H, W, CROP, STRIDE, B = 1024, 2048, 512, 341, 6
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = BeitForSemanticSegmentation(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def logits_of(crops):
    out = model(pixel_values=crops).logits
    return F.interpolate(out.float(), size=crops.shape[-2:], mode="bilinear", align_corners=False)


def slide(image):
    c = config.num_labels
    total = torch.zeros(1, c, H, W, device=device)
    count = torch.zeros(1, 1, H, W, device=device)
    boxes = []
    for y in range(0, max(H - CROP, 0) + STRIDE, STRIDE):
        for x in range(0, max(W - CROP, 0) + STRIDE, STRIDE):
            y0, x0 = min(y, H - CROP), min(x, W - CROP)
            boxes.append((y0, x0))
    for i in range(0, len(boxes), B):
        part = boxes[i : i + B]
        crops = torch.stack([image[:, y : y + CROP, x : x + CROP] for y, x in part])
        logits = logits_of(crops)
        for (y, x), one in zip(part, logits, strict=True):
            total[0, :, y : y + CROP, x : x + CROP] += one
            count[0, :, y : y + CROP, x : x + CROP] += 1
    return (total / count).argmax(1)


with torch.inference_mode():
    for _ in range(2):
        image = torch.randn(3, H, W, device=device, dtype=dtype)
        seg = slide(image)
if device == "cuda":
    print(
        f"slide {tuple(seg.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    image = torch.randn(1, 3, CROP, CROP, device=device, dtype=dtype)
    both = logits_of(torch.cat([image, image.flip(-1)]))
    seg = (both[:1] + both[1:].flip(-1)).argmax(1)
if device == "cuda":
    print(
        f"flip {tuple(seg.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
