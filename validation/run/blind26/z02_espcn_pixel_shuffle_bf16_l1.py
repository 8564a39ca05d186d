"""An ESPCN-style super-resolution net (5x5 and 3x3 convolutions, tanh, a sub-pixel convolution
to 3*4*4 channels and pixel_shuffle(4)), trained under bf16 autocast with an L1 loss against
4x upscaled targets, batch 16 of 96x96 crops, AdamW (foreach), 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2602)
B, R, C = (2, 16, 8) if SMALL else (16, 96, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ESPCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, C, 5, padding=2)
        self.c2 = nn.Conv2d(C, C // 2, 3, padding=1)
        self.c3 = nn.Conv2d(C // 2, 3 * 16, 3, padding=1)
        self.shuffle = nn.PixelShuffle(4)

    def forward(self, x):
        x = torch.tanh(self.c1(x))
        x = torch.tanh(self.c2(x))
        return self.shuffle(self.c3(x))


model = ESPCN().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    low = torch.rand(B, 3, R, R, device=device)
    high = torch.rand(B, 3, 4 * R, 4 * R, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.l1_loss(model(low), high)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del low, high, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
