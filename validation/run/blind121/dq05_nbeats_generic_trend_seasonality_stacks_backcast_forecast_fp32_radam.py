"""N-BEATS written from the paper: an interpretable trend stack (polynomial basis of degree 3) and
seasonality stack (Fourier basis), then a generic stack, each of 3 blocks of 4 fully connected
layers of 512 with ReLU whose theta heads project onto backcast and forecast; doubly residual
stacking over a lookback of 7 horizons; sMAPE loss on masked (padded) histories, fp32, RAdam with
decoupled weight decay, 4 training steps of large batches of windows cut from a long series with
unfold, then a rolling evaluation of 8 horizons under no_grad; 6 phases."""

import os

import numpy as np
import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12105)
H = 48
L = 7 * H
B = 64 if SMALL else 16384
WIDTH, N_BLOCKS = (64, 2) if SMALL else (512, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"


def trend_basis(degree, n, offset):
    t = (torch.arange(n, dtype=torch.float32) + offset) / (L + H)
    return torch.stack([t**i for i in range(degree + 1)])


def season_basis(n, offset):
    t = (torch.arange(n, dtype=torch.float32) + offset) / (L + H)
    k = torch.arange(1, H // 2)
    ang = 2 * np.pi * k[:, None] * t[None]
    return torch.cat([torch.ones(1, n), torch.cos(ang), torch.sin(ang)])


class Block(nn.Module):
    def __init__(self, kind):
        super().__init__()
        layers = [nn.Linear(L, WIDTH), nn.ReLU()]
        for _ in range(3):
            layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
        self.fc = nn.Sequential(*layers)
        self.kind = kind
        if kind == "generic":
            self.theta_b = nn.Linear(WIDTH, 32, bias=False)
            self.theta_f = nn.Linear(WIDTH, 32, bias=False)
            self.back = nn.Linear(32, L)
            self.fore = nn.Linear(32, H)
        else:
            bb = trend_basis(3, L, -L) if kind == "trend" else season_basis(L, -L)
            fb = trend_basis(3, H, 0) if kind == "trend" else season_basis(H, 0)
            self.register_buffer("bb", bb)
            self.register_buffer("fb", fb)
            self.theta_b = nn.Linear(WIDTH, bb.shape[0], bias=False)
            self.theta_f = nn.Linear(WIDTH, fb.shape[0], bias=False)

    def forward(self, x):
        h = self.fc(x)
        if self.kind == "generic":
            return self.back(self.theta_b(h)), self.fore(self.theta_f(h))
        return self.theta_b(h) @ self.bb, self.theta_f(h) @ self.fb


class NBeats(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            Block(k) for k in ["trend", "seasonality", "generic"] for _ in range(N_BLOCKS)
        )

    def forward(self, x, mask):
        residual = x.flip(1)
        mask = mask.flip(1)
        forecast = x[:, -1:]
        for blk in self.blocks:
            b, f = blk(residual)
            residual = (residual - b) * mask
            forecast = forecast + f
        return forecast


def smape(pred, target, mask):
    d = (pred.abs() + target.abs()).clamp(min=1e-8)
    return 200 * ((pred - target).abs() / d * mask).sum() / mask.sum().clamp(min=1)


model = NBeats().to(device)
opt = torch.optim.RAdam(model.parameters(), lr=1e-3, weight_decay=1e-4, decoupled_weight_decay=True)

series = torch.randn(64, 4000 if not SMALL else 600, device=device).cumsum(1) + 100.0
windows = series.unfold(1, L + H, 7).reshape(-1, L + H)

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(4):
    idx = torch.randint(0, windows.shape[0], (B,), device=device)
    w = windows[idx]
    x, y = w[:, :L], w[:, L:]
    pad = torch.randint(0, L // 2, (B, 1), device=device)
    mask = (torch.arange(L, device=device)[None] >= pad).float()
    x = x * mask
    ymask = torch.ones_like(y)
    loss = smape(model(x, mask), y, ymask)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} smape {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del w, x, y, loss, mask
model.eval()
with torch.no_grad():
    hist = series[:, -L:].repeat(64 if not SMALL else 2, 1)
    ones = torch.ones_like(hist)
    preds = []
    for _ in range(8):
        f = model(hist, ones)
        preds.append(f)
        hist = torch.cat([hist[:, H:], f], 1)
    preds = torch.cat(preds, 1)
if device == "cuda":
    print(
        f"rolling {tuple(preds.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
