"""A gated PixelCNN: 12 layers of 7x7 (then 3x3) convolutions whose weights are masked in each forward
(weight * mask, type A then B), 256 channels split into tanh and sigmoid gates, a 256-way softmax per
subpixel, 32x32 RGB images at batch 64 under bf16 autocast, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6805)
C, N, B, S = (8, 2, 2, 8) if SMALL else (256, 12, 64, 32)


class MaskedConv(nn.Conv2d):
    def __init__(self, cin, cout, k, kind):
        super().__init__(cin, cout, k, padding=k // 2)
        mask = torch.ones_like(self.weight)
        mask[:, :, k // 2, k // 2 + (kind == "B") :] = 0
        mask[:, :, k // 2 + 1 :] = 0
        self.register_buffer("mask", mask)

    def forward(self, x):
        return F.conv2d(x, self.weight * self.mask, self.bias, padding=self.padding)


class PixelCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = MaskedConv(3, 2 * C, 7, "A")
        self.layers = nn.ModuleList(MaskedConv(C, 2 * C, 3, "B") for _ in range(N))
        self.out = nn.Conv2d(C, 3 * 256, 1)

    def forward(self, x):
        a, b = self.first(x).chunk(2, dim=1)
        h = torch.tanh(a) * torch.sigmoid(b)
        for conv in self.layers:
            a, b = conv(h).chunk(2, dim=1)
            h = h + torch.tanh(a) * torch.sigmoid(b)
        return self.out(h).view(x.shape[0], 256, 3, S, S)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = PixelCNN().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randint(0, 256, (B, 3, S, S), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(pixels.float() / 127.5 - 1)
    loss = F.cross_entropy(logits.float(), pixels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del pixels, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
