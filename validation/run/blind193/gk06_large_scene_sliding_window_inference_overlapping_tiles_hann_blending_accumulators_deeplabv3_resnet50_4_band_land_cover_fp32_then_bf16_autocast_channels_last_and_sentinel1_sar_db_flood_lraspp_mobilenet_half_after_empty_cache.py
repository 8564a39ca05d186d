"""Large-scene inference with overlapping tiles, the way remote-sensing practitioners map whole satellite
scenes: a land-cover model over a 4-band scene, then a SAR flood-mapping model over a Sentinel-1 scene.

Land cover (DeepGlobe-like, 7 classes): torchvision deeplabv3_resnet50 (random init, no weights) whose
first convolution is widened to 4 bands (RGB + NIR, the red kernel copied into NIR). The scene is a
4 x 3072 x 3072 uint16-like int16 raster on the device; windows of 512 px with a stride of 384 (128 px
overlap, last window aligned to the scene edge: 8 x 8 = 64 windows) are cut, normalized and stacked into
batches, the logits weighted by a 2-D Hann window (plus 1e-3) are accumulated into a float32 7 x 3072 x
3072 sum and a weight map, and the class map is the argmax of sum / weight, moved to the host as uint8.

Phases: building the model and one warm-up batch of 4 windows under torch.inference_mode; the fp32 scene
at batch 16; the same scene under bf16 autocast with the model and batches in channels_last at batch 32;
then, after del + torch.cuda.empty_cache(), Sentinel-1 flood mapping: a 2-band (VV, VH) 4096 x 4096
scene of linear backscatter made on the device, converted to dB (10 log10, clamped at -30), a torchvision
lraspp_mobilenet_v3_large with a 2-band first conv and 2 classes converted with .half(), 1024 px windows
with a 256 px overlap at batch 8 in fp16, softmax water probabilities blended in float32, the flood mask
moved to the host. 4 phases."""

import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19306)
if SMALL:
    SCENE, TILE, STRIDE, B32, B16, SAR_SCENE, SAR_TILE, SAR_STRIDE, SAR_B = (
        384,
        128,
        96,
        4,
        8,
        512,
        256,
        192,
        2,
    )
else:
    SCENE, TILE, STRIDE, B32, B16, SAR_SCENE, SAR_TILE, SAR_STRIDE, SAR_B = (
        3072,
        512,
        384,
        16,
        32,
        4096,
        1024,
        768,
        8,
    )
N_CLASSES = 7
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def widen(conv, bands, src=(0, 1, 2, 0)):
    new = nn.Conv2d(
        bands, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=conv.bias is not None
    )
    with torch.no_grad():
        for i in range(bands):
            new.weight[:, i] = conv.weight[:, src[i % len(src)]]
    return new


def window_starts(size, tile, stride):
    starts = list(range(0, size - tile + 1, stride))
    if starts[-1] != size - tile:
        starts.append(size - tile)
    return starts


def hann2d(tile):
    w = torch.hann_window(tile, periodic=False, device=device)
    return torch.outer(w, w) + 1e-3


def sliding_window(model, scene, n_out, tile, stride, batch, prep, head, channels_last=False, dtype=None):
    _, h, w = scene.shape
    acc = torch.zeros(n_out, h, w, device=device)
    wsum = torch.zeros(1, h, w, device=device)
    win = hann2d(tile)
    coords = [(r, c) for r in window_starts(h, tile, stride) for c in window_starts(w, tile, stride)]
    for i in range(0, len(coords), batch):
        chunk = coords[i : i + batch]
        x = torch.stack([scene[:, r : r + tile, c : c + tile] for r, c in chunk])
        x = prep(x)
        if dtype is not None:
            x = x.to(dtype)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out = head(model(x)["out"]).float() * win
        for k, (r, c) in enumerate(chunk):
            acc[:, r : r + tile, c : c + tile] += out[k]
            wsum[:, r : r + tile, c : c + tile] += win
    return acc / wsum, len(coords)


MEAN = torch.tensor([450.0, 600.0, 700.0, 2200.0], device=device)[:, None, None]
STD = torch.tensor([300.0, 320.0, 380.0, 900.0], device=device)[:, None, None]


def prep_optical(x):
    return (x.float() - MEAN) / STD


model = torchvision.models.segmentation.deeplabv3_resnet50(
    weights=None, weights_backbone=None, num_classes=N_CLASSES, aux_loss=False
)
model.backbone.conv1 = widen(model.backbone.conv1, 4)
model = model.to(device).eval()
scene = torch.randint(0, 10000, (4, SCENE, SCENE), dtype=torch.int16, device=device)
with torch.inference_mode():
    warm = model(prep_optical(scene[:, :TILE, : 4 * TILE].unfold(2, TILE, TILE).permute(2, 0, 1, 3)))["out"]
print(f"deeplabv3 params {sum(p.numel() for p in model.parameters())} warm-up {tuple(warm.shape)}")
del warm
if device == "cuda":
    print(f"build peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    prob, n = sliding_window(model, scene, N_CLASSES, TILE, STRIDE, B32, prep_optical, lambda o: o)
    classes = prob.argmax(0).to(torch.uint8).cpu()
del prob
print(f"fp32: {n} windows, class histogram {torch.bincount(classes.flatten(), minlength=N_CLASSES).tolist()}")
if device == "cuda":
    print(f"fp32 scene peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model = model.to(memory_format=torch.channels_last)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    prob, n = sliding_window(
        model, scene, N_CLASSES, TILE, STRIDE, B16, prep_optical, lambda o: o, channels_last=True
    )
    classes_bf16 = prob.argmax(0).to(torch.uint8).cpu()
del prob
print(f"bf16: agreement with fp32 {(classes_bf16 == classes).float().mean():.4f}")
if device == "cuda":
    print(f"bf16 scene peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, scene
if device == "cuda":
    torch.cuda.empty_cache()

sar = torchvision.models.segmentation.lraspp_mobilenet_v3_large(
    weights=None, weights_backbone=None, num_classes=2
)
sar.backbone["0"][0] = widen(sar.backbone["0"][0], 2, src=(0, 1))
sar = sar.to(device).eval()
if amp:
    sar = sar.half()
linear = torch.empty(2, SAR_SCENE, SAR_SCENE, device=device).exponential_(20.0)


def prep_sar(x):
    return ((10 * torch.log10(x.clamp(min=1e-6))).clamp(min=-30.0) + 15.0) / 10.0


with torch.inference_mode():
    water, n = sliding_window(
        sar,
        linear,
        1,
        SAR_TILE,
        SAR_STRIDE,
        SAR_B,
        prep_sar,
        lambda o: o.float().softmax(1)[:, 1:],
        dtype=torch.float16 if amp else None,
    )
    flood = (water[0] > 0.5).cpu()
print(f"SAR: {n} windows, flooded fraction {flood.float().mean():.4f}")
if device == "cuda":
    print(
        f"sar allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
