"""An MLP discriminator whose Linear layers carry torch.nn.utils.parametrizations.weight_norm (the
hidden ones) and spectral_norm (the last), fp32, Adam(betas=(0.5, 0.999)), 2048 wide, 5 layers,
LeakyReLU, batch 1024, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2403)
B, D, W, DEPTH = (8, 16, 32, 2) if SMALL else (1024, 1024, 2048, 5)
device = "cuda" if torch.cuda.is_available() else "cpu"
layers, width = [], D
for _ in range(DEPTH):
    layers += [weight_norm(nn.Linear(width, W)), nn.LeakyReLU(0.2)]
    width = W
model = nn.Sequential(*layers, spectral_norm(nn.Linear(W, 1))).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.5, 0.999))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    real, fake = torch.randn(B, D, device=device), torch.randn(B, D, device=device)
    loss = nn.functional.softplus(-model(real)).mean() + nn.functional.softplus(model(fake)).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
