"""A WaveNet-style stack: 12 dilated causal Conv1d layers (dilation 1..2048, kernel 2, left padding by F.pad)
under torch.nn.utils.parametrizations.weight_norm, gated tanh*sigmoid units, 1x1 residual and skip
convolutions summed, fp32, Adam, batch 16 x 16000 samples, 64 channels, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SAMPLES, CH, LAYERS = (2, 256, 8, 3) if SMALL else (16, 16000, 64, 12)
torch.manual_seed(1204)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Layer(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.dilation = dilation
        self.conv = weight_norm(nn.Conv1d(CH, 2 * CH, 2, dilation=dilation))
        self.res = weight_norm(nn.Conv1d(CH, CH, 1))
        self.skip = weight_norm(nn.Conv1d(CH, CH, 1))

    def forward(self, x):
        h = self.conv(F.pad(x, (self.dilation, 0)))
        a, b = h.chunk(2, dim=1)
        g = torch.tanh(a) * torch.sigmoid(b)
        return x + self.res(g), self.skip(g)


class WaveNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv1d(1, CH, 1)
        self.layers = nn.ModuleList(Layer(2**i) for i in range(LAYERS))
        self.out = nn.Sequential(nn.ReLU(), nn.Conv1d(CH, CH, 1), nn.ReLU(), nn.Conv1d(CH, 256, 1))

    def forward(self, x):
        x = self.inp(x)
        skips = 0
        for layer in self.layers:
            x, s = layer(x)
            skips = skips + s
        return self.out(skips)


model = WaveNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    audio = torch.rand(BATCH, 1, SAMPLES, device=device) * 2 - 1
    target = torch.randint(0, 256, (BATCH, SAMPLES), device=device)
    loss = F.cross_entropy(model(audio), target)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
