"""A small image-to-image U-Net whose convolutions pad by `padding_mode="replicate"` (encoder) and
`"circular"` (decoder), InstanceNorm2d with affine parameters, `pixel_unshuffle`/`pixel_shuffle`
for down- and up-sampling and an L1 loss; batch 16 of 256x256 RGB, fp16 autocast with GradScaler,
Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5506)
B, HW, W = (2, 32, 8) if SMALL else (16, 256, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"


def conv(cin, cout, mode):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, padding_mode=mode), nn.InstanceNorm2d(cout, affine=True), nn.SiLU()
    )


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.e1 = conv(3, W, "replicate")
        self.e2 = conv(4 * W, 2 * W, "replicate")
        self.e3 = conv(8 * W, 4 * W, "replicate")
        self.d2 = conv(W + 2 * W, 2 * W, "circular")
        self.d1 = conv(W // 2 + W, W, "circular")
        self.out = nn.Conv2d(W, 3, 1)

    def forward(self, x):
        h1 = self.e1(x)
        h2 = self.e2(F.pixel_unshuffle(h1, 2))
        h3 = self.e3(F.pixel_unshuffle(h2, 2))
        u2 = self.d2(torch.cat([F.pixel_shuffle(h3, 2), h2], 1))
        u1 = self.d1(torch.cat([F.pixel_shuffle(u2, 2), h1], 1))
        return self.out(u1)


model = UNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
scaler = torch.amp.GradScaler(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    with torch.autocast(device, dtype=torch.float16):
        loss = F.l1_loss(model(x).float(), x)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
