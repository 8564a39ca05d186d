"""An ESPCN-style super-resolution network (3 convolutions, tanh, a 4x PixelShuffle), channels_last,
fp32, L1 loss against 4x-upsampled targets, Adam, a bicubic-upsampled baseline added to the output,
batch 64 at 96x96 -> 384x384, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SIZE = (2, 16) if SMALL else (64, 96)
torch.manual_seed(1105)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Conv2d(3, 64, 5, padding=2), nn.Tanh(),
    nn.Conv2d(64, 32, 3, padding=1), nn.Tanh(),
    nn.Conv2d(32, 3 * 16, 3, padding=1), nn.PixelShuffle(4),
).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    lr_img = torch.rand(BATCH, 3, SIZE, SIZE, device=device).contiguous(memory_format=torch.channels_last)
    hr_img = torch.rand(BATCH, 3, 4 * SIZE, 4 * SIZE, device=device)
    base = F.interpolate(lr_img, scale_factor=4, mode="bicubic", align_corners=False)
    loss = F.l1_loss(model(lr_img) + base, hr_img)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
