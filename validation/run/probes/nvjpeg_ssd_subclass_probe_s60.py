"""What the GPU does where helper tv's session-60 rules answer (blind267 probes), one JSON line a
case; the twin's answer comes from `vramscope run --gpu h200` of this file. (1) nvJPEG decode
(`decode_jpeg([...], device="cuda")`): the allocator's bytes after decoding an RGB and a one-
component JPEG in UNCHANGED (the twin: one (3, H, W) uint8 output an image, the gray one cloned from
its first plane, the three-plane one freed) and in GRAY; (2) nvJPEG encode of CUDA images: the
bitstream lengths of a flat, a gradient and a noise image at qualities 50 and 90 beside the host
encoder's (the twin takes the host's); (3) SSD's hard negative mining count: `loss[idx.sort(1)[1] <
k]` over values the twin does not carry (exactly min(k, n) a row); (4) torchvision BoundingBoxes
built on the GPU through v2.RandomZoomOut and RandomIoUCrop on CUDA: the GPU's boxes and crop (the
twin reads zeros after `as_subclass`, a defect found and not fixed: fixtures/run/README.md's blind267)."""

import json

import torch
from torchvision import tv_tensors
from torchvision.io import ImageReadMode, decode_jpeg, encode_jpeg
from torchvision.transforms import v2


def line(case, **kw):
    print(json.dumps({"case": case, **kw}), flush=True)


def mem():
    return {"allocated": torch.cuda.memory_allocated(), "peak": torch.cuda.max_memory_allocated()}


torch.manual_seed(0)
rgb = encode_jpeg(torch.full((3, 240, 320), 128, dtype=torch.uint8))
gray = encode_jpeg(torch.full((1, 100, 50), 64, dtype=torch.uint8))
torch.cuda.reset_peak_memory_stats()
out = decode_jpeg([rgb, gray], device="cuda")
line("decode_unchanged", shapes=[list(t.shape) for t in out], **mem())
del out
torch.cuda.reset_peak_memory_stats()
out = decode_jpeg([rgb, gray], device="cuda", mode=ImageReadMode.GRAY)
line("decode_gray", shapes=[list(t.shape) for t in out], **mem())
del out

h, w = 256, 384
ramp = (torch.arange(w).repeat(h, 1) % 256).to(torch.uint8)
images = {
    "flat": torch.full((3, h, w), 100, dtype=torch.uint8),
    "gradient": torch.stack([ramp, ramp.flip(1), ramp]),
    "noise": torch.randint(0, 256, (3, h, w), dtype=torch.uint8),
}
for q in (50, 90):
    for name, img in images.items():
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        enc = encode_jpeg(img.cuda(), quality=q)
        line(
            "encode",
            image=name,
            quality=q,
            gpu_len=enc.numel(),
            host_len=encode_jpeg(img, quality=q).numel(),
            allocated_delta=torch.cuda.memory_allocated() - before,
            **mem(),
        )
        del enc

loss = torch.randn(24, 8732, device="cuda")
k = torch.arange(24, device="cuda").view(24, 1) * 400
_, idx = loss.sort(1, descending=True)
torch.cuda.reset_peak_memory_stats()
picked = loss[idx.sort(1)[1] < k]
line("hard_negatives", picked=picked.numel(), expected=sum(min(400 * i, 8732) for i in range(24)), **mem())

img = tv_tensors.Image(torch.randint(0, 256, (3, 300, 400), dtype=torch.uint8, device="cuda"))
boxes = tv_tensors.BoundingBoxes(
    torch.tensor([[10, 20, 100, 200], [50, 60, 300, 280]], device="cuda", dtype=torch.float32),
    format="XYXY",
    canvas_size=(300, 400),
)
for t in (v2.RandomZoomOut(fill=0, p=1.0), v2.RandomIoUCrop()):
    img, boxes = t(img, boxes)
    line(type(t).__name__, image=list(img.shape), boxes=boxes.tolist())
