"""Robust regression with order statistics: a 6-layer MLP (width 4096) trained on a trimmed loss
(the per-sample errors `torch.sort`ed, the worst 10% dropped), a `kthvalue` median-of-errors
penalty and a `torch.histc` of the residuals logged each step; batch 65,536 of 256 features,
fp32, AdamW, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5204)
B, FIN, W = (64, 16, 32) if SMALL else (65536, 256, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"
layers = [nn.Linear(FIN, W), nn.ReLU()]
for _ in range(4):
    layers += [nn.Linear(W, W), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(W, 8)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, FIN, device=device)
    y = torch.randn(B, 8, device=device)
    err = (model(x) - y).pow(2).mean(-1)
    kept = torch.sort(err).values[: int(B * 0.9)]
    median = torch.kthvalue(err, B // 2).values
    loss = kept.mean() + 0.1 * median
    loss.backward()
    with torch.no_grad():
        hist = torch.histc(err.detach(), bins=64, min=0.0, max=4.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, err, kept, median, loss, hist
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
