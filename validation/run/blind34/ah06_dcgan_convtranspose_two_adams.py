"""DCGAN as the PyTorch tutorial trains it, at 64x64: a generator of ConvTranspose2d, BatchNorm2d
and ReLU from a 100-d noise vector, a discriminator of strided Conv2d, BatchNorm2d and LeakyReLU,
BCEWithLogitsLoss, one Adam (betas 0.5, 0.999) each; the discriminator step on real and detached
fake images, then the generator step; fp32, batch 256, 2 iterations; 3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3406)
B, NZ, NG = (4, 8, 4) if SMALL else (256, 100, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"

G = nn.Sequential(
    nn.ConvTranspose2d(NZ, NG * 8, 4, 1, 0, bias=False),
    nn.BatchNorm2d(NG * 8),
    nn.ReLU(True),
    nn.ConvTranspose2d(NG * 8, NG * 4, 4, 2, 1, bias=False),
    nn.BatchNorm2d(NG * 4),
    nn.ReLU(True),
    nn.ConvTranspose2d(NG * 4, NG * 2, 4, 2, 1, bias=False),
    nn.BatchNorm2d(NG * 2),
    nn.ReLU(True),
    nn.ConvTranspose2d(NG * 2, NG, 4, 2, 1, bias=False),
    nn.BatchNorm2d(NG),
    nn.ReLU(True),
    nn.ConvTranspose2d(NG, 3, 4, 2, 1, bias=False),
    nn.Tanh(),
).to(device)
D = nn.Sequential(
    nn.Conv2d(3, NG, 4, 2, 1, bias=False),
    nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(NG, NG * 2, 4, 2, 1, bias=False),
    nn.BatchNorm2d(NG * 2),
    nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(NG * 2, NG * 4, 4, 2, 1, bias=False),
    nn.BatchNorm2d(NG * 4),
    nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(NG * 4, NG * 8, 4, 2, 1, bias=False),
    nn.BatchNorm2d(NG * 8),
    nn.LeakyReLU(0.2, inplace=True),
    nn.Conv2d(NG * 8, 1, 4, 1, 0, bias=False),
    nn.Flatten(),
).to(device)
criterion = nn.BCEWithLogitsLoss()
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for it in range(2):
    real = torch.rand(B, 3, 64, 64, device=device) * 2 - 1
    ones = torch.ones(B, 1, device=device)
    zeros = torch.zeros(B, 1, device=device)
    fake = G(torch.randn(B, NZ, 1, 1, device=device))
    D.zero_grad()
    loss_d = criterion(D(real), ones) + criterion(D(fake.detach()), zeros)
    loss_d.backward()
    opt_d.step()
    G.zero_grad()
    loss_g = criterion(D(fake), ones)
    loss_g.backward()
    opt_g.step()
    del real, ones, zeros, fake, loss_d, loss_g
    if device == "cuda":
        print(f"step {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
