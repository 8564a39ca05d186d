"""A 2-D Fourier neural operator (FNO): lift to 64 channels, 4 spectral layers (`torch.fft.rfft2`, a
complex-weight `einsum` on the lowest 16 x 16 modes, `torch.fft.irfft2`) plus a pointwise Conv2d and GELU,
project; fp32, batch 32 at 128 x 128, MSE loss, Adam, 3 steps; then a no_grad pass at batch 64."""

import os

import torch
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
BATCH, RES, WIDTH, MODES = (2, 32, 8, 4) if SMALL else (32, 128, 64, 16)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(803)


class SpectralConv(nn.Module):
    def __init__(self, width, modes):
        super().__init__()
        self.modes = modes
        scale = 1 / (width * width)
        self.w1 = nn.Parameter(scale * torch.randn(width, width, modes, modes, dtype=torch.cfloat))
        self.w2 = nn.Parameter(scale * torch.randn(width, width, modes, modes, dtype=torch.cfloat))

    def forward(self, x):
        b, c, h, w = x.shape
        xf = torch.fft.rfft2(x)
        out = torch.zeros(b, c, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
        m = self.modes
        out[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :m, :m], self.w1)
        out[:, :, -m:, :m] = torch.einsum("bixy,ioxy->boxy", xf[:, :, -m:, :m], self.w2)
        return torch.fft.irfft2(out, s=(h, w))


class FNO(nn.Module):
    def __init__(self):
        super().__init__()
        self.lift = nn.Conv2d(3, WIDTH, 1)
        self.spectral = nn.ModuleList(SpectralConv(WIDTH, MODES) for _ in range(4))
        self.pointwise = nn.ModuleList(nn.Conv2d(WIDTH, WIDTH, 1) for _ in range(4))
        self.project = nn.Sequential(nn.Conv2d(WIDTH, 128, 1), nn.GELU(), nn.Conv2d(128, 1, 1))

    def forward(self, x):
        x = self.lift(x)
        for spectral, pointwise in zip(self.spectral, self.pointwise):
            x = nn.functional.gelu(spectral(x) + pointwise(x))
        return self.project(x)


model = FNO().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    y = torch.randn(BATCH, 1, RES, RES, device=device)
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    pred = model(torch.randn(BATCH * 2, 3, RES, RES, device=device))
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
