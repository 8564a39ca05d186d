"""An image-restoration U-Net written by hand: PixelUnshuffle down-sampling, reflect-padded 3x3
convolutions, PixelShuffle up-sampling, skip concatenations, the input pyramid made by
antialiased bicubic `interpolate`, an L1 loss at every scale, fp32, AdamW, batch 8 of 3x256x256,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4903)
B, IMG, C = (2, 32, 8) if SMALL else (8, 256, 48)
device = "cuda" if torch.cuda.is_available() else "cpu"


def conv(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, padding_mode="reflect"),
        nn.GELU(),
        nn.Conv2d(cout, cout, 3, padding=1, padding_mode="reflect"),
    )


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = conv(3, C)
        self.down = nn.ModuleList([conv(C * 4 * 2**i, C * 2 ** (i + 1)) for i in range(3)])
        self.up = nn.ModuleList([conv(C * 2 ** (i + 1) // 4 + C * 2**i, C * 2**i) for i in range(3)])
        self.heads = nn.ModuleList([nn.Conv2d(C * 2**i, 3, 1) for i in range(3)])

    def forward(self, x):
        skips, h = [], self.inp(x)
        for block in self.down:
            skips.append(h)
            h = block(F.pixel_unshuffle(h, 2))
        outs = []
        for i in reversed(range(3)):
            h = self.up[i](torch.cat([F.pixel_shuffle(h, 2), skips[i]], 1))
            outs.append(self.heads[i](h))
        return outs[::-1]


model = Net().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clean = torch.rand(B, 3, IMG, IMG, device=device)
    noisy = clean + 0.1 * torch.randn_like(clean)
    outs = model(noisy)
    loss = 0
    for i, out in enumerate(outs):
        target = (
            clean if i == 0 else F.interpolate(clean, scale_factor=0.5**i, mode="bicubic", antialias=True)
        )
        target = F.interpolate(target, size=out.shape[-2:], mode="bicubic", antialias=True)
        loss = loss + F.l1_loss(out, target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clean, noisy, outs, loss, target
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
