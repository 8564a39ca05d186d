"""Temporal convolutional network for multichannel sensor forecasting: 6 residual blocks of two
dilated causal Conv1d(k=3) layers (dilations 1..32, left padding by F.pad), a grouped depthwise
Conv1d smoothing stem and a 1x1 head; batch 100 of 500-sample windows with per-series valid lengths
made on the host and copied to the GPU; the loss is taken only on valid steps, picked with a
boolean mask from arange < length (masked_select-style indexing); fp32, Adam, 3 steps; then a
rolling 4-window forecast of 24 series under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10207)
B, L, C, HID, STEPS = (4, 60, 8, 16, 2) if SMALL else (100, 500, 24, 128, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self, ch, dil):
        super().__init__()
        self.dil = dil
        self.c1 = nn.Conv1d(ch, ch, 3, dilation=dil)
        self.c2 = nn.Conv1d(ch, ch, 3, dilation=dil)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = F.relu(self.c1(F.pad(x, (2 * self.dil, 0))))
        h = self.drop(F.relu(self.c2(F.pad(h, (2 * self.dil, 0)))))
        return F.relu(x + h)


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.smooth = nn.Conv1d(C, C, 5, padding=2, groups=C)
        self.inp = nn.Conv1d(C, HID, 1)
        self.blocks = nn.Sequential(*[Block(HID, 2**i) for i in range(6)])
        self.out = nn.Conv1d(HID, C, 1)

    def forward(self, x):
        return self.out(self.blocks(self.inp(self.smooth(x))))


gen = torch.Generator().manual_seed(3)


def batch(n):
    lengths = torch.randint(L // 3, L + 1, (n,), generator=gen)
    x = torch.randn(n, C, L + 1, generator=gen).cumsum(-1) * 0.1
    return x.to(device), lengths.to(device)


model = TCN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x, lengths = batch(B)
    valid = torch.arange(L, device=device)[None, :] < lengths[:, None]
    pred = model(x[..., :-1])
    err = (pred - x[..., 1:]).transpose(1, 2)[valid]
    loss = err.pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del x, lengths, valid, pred, err, loss
model.eval()
with torch.no_grad():
    x, _ = batch(24)
    hist = x[..., :-1]
    outs = []
    for _ in range(4):
        nxt = model(hist)[..., -1:]
        outs.append(nxt)
        hist = torch.cat([hist[..., 1:], nxt], dim=-1)
    fc = torch.cat(outs, -1)
if device == "cuda":
    print(f"eval {fc.shape} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
