"""HF Swin2SRForImageSuperResolution (classical x2 upscaling: 180 wide, 6 residual Swin-V2 groups of 6
layers, 8x8 windows, pixel-shuffle upsampler) in fp16 weights under inference_mode: 4 batches of
4 RGB images of 256x256 upscaled to 512x512, the first two a tile of a larger image; 2 phases."""

import os

import torch
from transformers import Swin2SRConfig, Swin2SRForImageSuperResolution

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8302)
if SMALL:
    config = Swin2SRConfig(embed_dim=16, depths=[2], num_heads=[2], window_size=4, upscale=2)
    B, S = 2, 16
else:
    config = Swin2SRConfig(
        embed_dim=180, depths=[6] * 6, num_heads=[6] * 6, window_size=8, upscale=2, upsampler="pixelshuffle"
    )
    B, S = 4, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = Swin2SRForImageSuperResolution(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
big = torch.rand(B, 3, 2 * S, S, device=device, dtype=dtype)
with torch.inference_mode():
    outs = []
    for tile in big.split(S, dim=2):
        outs.append(model(pixel_values=tile).reconstruction.clamp_(0, 1))
    image = torch.cat(outs, dim=2)
if device == "cuda":
    print(f"tiles peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del outs, big
with torch.inference_mode():
    for _ in range(2):
        x = torch.rand(B, 3, S, S, device=device, dtype=dtype)
        y = model(pixel_values=x).reconstruction
        y = (y.clamp(0, 1) * 255).round().to(torch.uint8)
if device == "cuda":
    print(f"batches peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
