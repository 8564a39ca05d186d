"""A Glow-style normalizing flow written by hand: 3 levels of 8 steps (actnorm, an invertible 1x1
convolution whose log-determinant is `torch.slogdet` of its C x C weight, an affine coupling whose
scale and shift come from a small CNN), squeeze between levels, the Gaussian log-likelihood,
fp32, Adam, batch 32 of 3x64x64 images, 2 steps; 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4801)
B, IMG, HID, K = (2, 16, 16, 2) if SMALL else (32, 64, 256, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Step(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.logs = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.weight = nn.Parameter(torch.linalg.qr(torch.randn(c, c))[0])
        self.net = nn.Sequential(
            nn.Conv2d(c // 2, HID, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(HID, HID, 1),
            nn.ReLU(),
            nn.Conv2d(HID, c, 3, padding=1),
        )

    def forward(self, x):
        hw = x.shape[2] * x.shape[3]
        x = (x + self.loc) * self.logs.exp()
        logdet = self.logs.sum() * hw
        x = F.conv2d(x, self.weight.view(*self.weight.shape, 1, 1))
        logdet = logdet + torch.slogdet(self.weight)[1] * hw
        a, b = x.chunk(2, 1)
        h = self.net(a)
        shift, scale = h[:, 0::2], torch.sigmoid(h[:, 1::2] + 2.0)
        b = (b + shift) * scale
        logdet = logdet + scale.log().flatten(1).sum(1)
        return torch.cat([a, b], 1), logdet


def squeeze(x):
    b, c, h, w = x.shape
    x = x.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return x.reshape(b, c * 4, h // 2, w // 2)


class Glow(nn.Module):
    def __init__(self):
        super().__init__()
        self.levels = nn.ModuleList(
            [nn.ModuleList([Step(3 * 4 ** (i + 1)) for _ in range(K)]) for i in range(3)]
        )

    def forward(self, x):
        logdet = 0
        for level in self.levels:
            x = squeeze(x)
            for step in level:
                x, ld = step(x)
                logdet = logdet + ld
        prior = -0.5 * (x**2 + math.log(2 * math.pi)).flatten(1).sum(1)
        return -(prior + logdet).mean()


model = Glow().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.rand(B, 3, IMG, IMG, device=device) - 0.5
    loss = model(x)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
