"""A batched image-inference service written by hand around CUDA streams: uint8 NHWC frames
decoded on the host land in a ring of pinned staging buffers, a copy stream uploads them
non_blocking and signals a torch.cuda.Event; two compute streams take batches in turn
(wait_event on the upload), convert on the GPU (permute, float16, scale, resize to the model's
size with antialiased bilinear interpolation, Normalize, channels_last), run one of two fp16
models (torchvision ConvNeXt-Tiny and EfficientNet-B0 in .half(), eval, channels_last) under
inference_mode, softmax and top-5, and copy the top-5 back non_blocking into pinned host tensors
(record_stream on each upload as the compute stream consumes it, an event per batch synchronized
before reading results). Frames of 480 x 640, batches of 64, 8 batches; then a burst of 4 batches
of 192 on both streams at once, then a single-stream pass at batch 384 with torch.cuda.Event
timing; 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torchvision.transforms import v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15206)
FH, FW, SIZE = (48, 64, 32) if SMALL else (480, 640, 224)
B, NB, BURST, BIG = (4, 4, 6, 8) if SMALL else (64, 8, 192, 384)
device = "cuda" if torch.cuda.is_available() else "cpu"
assert device == "cuda" or SMALL, "the service needs CUDA streams"
cuda = device == "cuda"
dtype = torch.float16 if cuda else torch.float32

normalize = v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
models = [
    torchvision.models.convnext_tiny(num_classes=1000),
    torchvision.models.efficientnet_b0(num_classes=1000),
]
models = [m.to(device, dtype=dtype, memory_format=torch.channels_last).eval() for m in models]
copy_stream = torch.cuda.Stream() if cuda else None
compute = [torch.cuda.Stream(), torch.cuda.Stream()] if cuda else [None, None]
staging = [torch.empty((BIG, FH, FW, 3), dtype=torch.uint8) for _ in range(2)]
results = [torch.empty((BIG, 5), dtype=torch.int64) for _ in range(2)]
if cuda:
    staging = [s.pin_memory() for s in staging]
    results = [r.pin_memory() for r in results]
if cuda:
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def stream_ctx(s):
    return torch.cuda.stream(s) if s is not None else torch.autocast("cpu", enabled=False)


def upload(slot, n):
    buf = staging[slot][:n]
    buf.copy_(torch.randint(0, 256, (n, FH, FW, 3), dtype=torch.uint8))  # the decoder's output
    with stream_ctx(copy_stream):
        frames = buf.to(device, non_blocking=True)
        ready = torch.cuda.Event() if cuda else None
        if cuda:
            ready.record()
    return frames, ready


def infer(frames, ready, stream, model, slot):
    with stream_ctx(stream), torch.inference_mode():
        if cuda:
            stream.wait_event(ready)
            frames.record_stream(stream)
        x = frames.permute(0, 3, 1, 2).to(dtype).div_(255)
        x = F.interpolate(x, size=(SIZE, SIZE), mode="bilinear", antialias=True, align_corners=False)
        x = normalize(x).contiguous(memory_format=torch.channels_last)
        probs = model(x).float().softmax(dim=-1)
        top = probs.topk(5, dim=-1).indices
        out = results[slot][: top.shape[0]]
        out.copy_(top, non_blocking=True)
        done = torch.cuda.Event() if cuda else None
        if cuda:
            done.record()
    return out, done


served = 0
pending = []
for i in range(NB):
    frames, ready = upload(i % 2, B)
    out, done = infer(frames, ready, compute[i % 2], models[i % 2], i % 2)
    pending.append((out, done))
    del frames
    if len(pending) == 2:
        for out, done in pending:
            if cuda:
                done.synchronize()
            served += out.shape[0]
        pending.clear()
if cuda:
    print(f"served {served} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for i in range(4):
    a, ra = upload(0, BURST)
    b, rb = upload(1, BURST)
    oa, da = infer(a, ra, compute[0], models[0], 0)
    ob, db = infer(b, rb, compute[1], models[1], 1)
    del a, b
    if cuda:
        da.synchronize()
        db.synchronize()
    served += oa.shape[0] + ob.shape[0]
    if cuda and i % 2 == 1:
        print(
            f"burst {i} served {served} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

if cuda:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(compute[0])
frames, ready = upload(0, BIG)
out, done = infer(frames, ready, compute[0], models[0], 0)
del frames
if cuda:
    end.record(compute[0])
    end.synchronize()
    ms = start.elapsed_time(end)
    print(
        f"big batch {out.shape[0]} ms {ms:.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
