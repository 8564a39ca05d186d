"""A Fourier neural operator for 2-D PDE data: spectral convolutions through torch.fft.rfft2, a
complex einsum with complex-valued weights on the lowest 16x16 modes, irfft2 back, plus pointwise
1x1 convolutions, GELU, fp32, AdamW (foreach), width 64, 4 layers, batch 16 on a 256x256 grid,
2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4103)
W, L, M, B, N = (8, 2, 4, 2, 16) if SMALL else (64, 4, 16, 16, 256)


class Spectral(nn.Module):
    def __init__(self):
        super().__init__()
        scale = 1 / (W * W)
        self.w1 = nn.Parameter(scale * torch.randn(W, W, M, M, dtype=torch.cfloat))
        self.w2 = nn.Parameter(scale * torch.randn(W, W, M, M, dtype=torch.cfloat))

    def forward(self, x):
        b, _, h, w = x.shape
        xf = torch.fft.rfft2(x)
        out = torch.zeros(b, W, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
        out[:, :, :M, :M] = torch.einsum("bixy,ioxy->boxy", xf[:, :, :M, :M], self.w1)
        out[:, :, -M:, :M] = torch.einsum("bixy,ioxy->boxy", xf[:, :, -M:, :M], self.w2)
        return torch.fft.irfft2(out, s=(h, w))


class FNO(nn.Module):
    def __init__(self):
        super().__init__()
        self.lift = nn.Conv2d(3, W, 1)
        self.spectral = nn.ModuleList(Spectral() for _ in range(L))
        self.local = nn.ModuleList(nn.Conv2d(W, W, 1) for _ in range(L))
        self.proj = nn.Sequential(nn.Conv2d(W, 128, 1), nn.GELU(), nn.Conv2d(128, 1, 1))

    def forward(self, x):
        x = self.lift(x)
        for spec, loc in zip(self.spectral, self.local, strict=True):
            x = F.gelu(spec(x) + loc(x))
        return self.proj(x)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = FNO().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, N, N, device=device)
    y = torch.randn(B, 1, N, N, device=device)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
