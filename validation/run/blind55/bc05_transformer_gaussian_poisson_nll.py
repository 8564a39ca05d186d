"""Probabilistic forecasting: an 8-layer nn.TransformerEncoder (width 512, batch_first) over batch 64
x 2,048 time steps with two heads, a Gaussian (mean and variance, `gaussian_nll_loss`) and a
Poisson rate (`poisson_nll_loss` on log rates) per step; fp32, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5505)
B, T, D, L = (2, 32, 32, 1) if SMALL else (64, 2048, 512, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, D)
        layer = nn.TransformerEncoderLayer(D, 8, 4 * D, dropout=0.1, batch_first=True)
        self.body = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.gauss = nn.Linear(D, 2)
        self.rate = nn.Linear(D, 1)

    def forward(self, x):
        h = self.body(self.inp(x))
        mean, raw_var = self.gauss(h).unbind(-1)
        return mean, F.softplus(raw_var) + 1e-4, self.rate(h).squeeze(-1)


model = Forecaster().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, 16, device=device)
    y = torch.randn(B, T, device=device)
    counts = torch.poisson(torch.full((B, T), 3.0, device=device))
    mean, var, log_rate = model(x)
    loss = F.gaussian_nll_loss(mean, y, var) + F.poisson_nll_loss(log_rate, counts)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, counts, mean, var, log_rate, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
