"""A 1-D signal model: Conv1d layers with `padding_mode="circular"` and `"replicate"`, `LPPool1d`
(p=2) downsampling, a `ReplicationPad1d` before the head, regression by `huber_loss`; batch 256 of
16,384 samples with 8 channels, widths 64 to 256, fp32, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5502)
B, T, C = (2, 256, 4) if SMALL else (256, 16384, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"


def block(cin, cout, mode):
    return nn.Sequential(
        nn.Conv1d(cin, cout, 7, padding=3, padding_mode=mode), nn.GELU(), nn.LPPool1d(2, 4, 4)
    )


model = nn.Sequential(
    block(C, 64, "circular"),
    block(64, 128, "replicate"),
    block(128, 256, "circular"),
    nn.ReplicationPad1d(2),
    nn.Conv1d(256, 4, 5),
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, C, T, device=device)
    out = model(x)
    loss = F.huber_loss(out, torch.randn_like(out), delta=0.5)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
