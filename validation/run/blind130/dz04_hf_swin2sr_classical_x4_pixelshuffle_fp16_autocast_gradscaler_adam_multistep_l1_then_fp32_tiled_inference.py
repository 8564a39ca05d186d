"""A Swin2SR classical x4 super-resolution network from Swin2SRConfig (embed 180, 6 residual Swin V2
groups of 6 blocks with 6 heads, window 8, upsampler "pixelshuffle": two conv + PixelShuffle(2)
stages) trained on 64 x 64 low-resolution patches against 256 x 256 targets: batches of 8, L1 loss
under fp16 autocast with a GradScaler, Adam (lr 2e-4) with MultiStepLR, 3 steps; then fp32
inference under no_grad: a 176 x 240 image, and a 352 x 480 image upscaled in 4 tiles of
176 x 240 written into a preallocated 1408 x 1920 output; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Swin2SRConfig, Swin2SRForImageSuperResolution

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13004)
if SMALL:
    cfg = Swin2SRConfig(
        image_size=16,
        embed_dim=24,
        depths=[2, 2],
        num_heads=[2, 2],
        window_size=4,
        upscale=4,
        img_range=1.0,
        upsampler="pixelshuffle",
    )
    B, LR, H, W = 2, 16, 12, 16
else:
    cfg = Swin2SRConfig(
        image_size=64,
        embed_dim=180,
        depths=[6, 6, 6, 6, 6, 6],
        num_heads=[6, 6, 6, 6, 6, 6],
        window_size=8,
        upscale=4,
        img_range=1.0,
        upsampler="pixelshuffle",
    )
    B, LR, H, W = 8, 64, 176, 240
device = "cuda" if torch.cuda.is_available() else "cpu"
S = cfg.upscale

model = Swin2SRForImageSuperResolution(cfg).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.9, 0.99))
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[250000, 400000], gamma=0.5)
scaler = torch.amp.GradScaler(device)


def report(name):
    if device == "cuda":
        print(
            f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            f" allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {name}")


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    hr = torch.rand(B, 3, LR * S, LR * S, device=device)
    lr_img = F.interpolate(hr, scale_factor=1 / S, mode="bicubic", antialias=True).clamp_(0, 1)
    with torch.autocast(device, dtype=torch.float16):
        sr = model(pixel_values=lr_img).reconstruction
        loss = F.l1_loss(sr.float(), hr)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"loss {loss.item():.4f}")
    del hr, lr_img, sr, loss
    report(f"step {step}")

model.eval()
with torch.no_grad():
    img = torch.rand(1, 3, H, W, device=device)
    out = model(pixel_values=img).reconstruction
    print(f"single {tuple(out.shape)}")
    del out
report("single")
with torch.no_grad():
    big = torch.rand(1, 3, 2 * H, 2 * W, device=device)
    canvas = torch.empty(1, 3, 2 * H * S, 2 * W * S, device=device)
    for i in range(2):
        for j in range(2):
            tile = big[:, :, i * H : (i + 1) * H, j * W : (j + 1) * W]
            up = model(pixel_values=tile).reconstruction
            canvas[:, :, i * H * S : (i + 1) * H * S, j * W * S : (j + 1) * W * S] = up[
                :, :, : H * S, : W * S
            ]
            del up
    print(f"tiled {tuple(canvas.shape)} mean {canvas.mean().item():.4f}")
report("tiled")
