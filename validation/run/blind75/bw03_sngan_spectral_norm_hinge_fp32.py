"""An SNGAN at 64x64: a ConvTranspose2d generator with batch norm and a discriminator whose every
conv and linear layer carries `torch.nn.utils.parametrizations.spectral_norm` (a power iteration per
forward in training), hinge losses, Adam(0.0, 0.9) for both, batch 64, fp32; 2 iterations of
(discriminator step, generator step); 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7503)
B, Z, W = (2, 16, 8) if SMALL else (64, 128, 64)


def gen():
    return nn.Sequential(
        nn.ConvTranspose2d(Z, W * 8, 4, 1, 0),
        nn.BatchNorm2d(W * 8),
        nn.ReLU(True),
        nn.ConvTranspose2d(W * 8, W * 4, 4, 2, 1),
        nn.BatchNorm2d(W * 4),
        nn.ReLU(True),
        nn.ConvTranspose2d(W * 4, W * 2, 4, 2, 1),
        nn.BatchNorm2d(W * 2),
        nn.ReLU(True),
        nn.ConvTranspose2d(W * 2, W, 4, 2, 1),
        nn.BatchNorm2d(W),
        nn.ReLU(True),
        nn.ConvTranspose2d(W, 3, 4, 2, 1),
        nn.Tanh(),
    )


def disc():
    return nn.Sequential(
        spectral_norm(nn.Conv2d(3, W, 3, 1, 1)),
        nn.LeakyReLU(0.1),
        spectral_norm(nn.Conv2d(W, W * 2, 4, 2, 1)),
        nn.LeakyReLU(0.1),
        spectral_norm(nn.Conv2d(W * 2, W * 4, 4, 2, 1)),
        nn.LeakyReLU(0.1),
        spectral_norm(nn.Conv2d(W * 4, W * 8, 4, 2, 1)),
        nn.LeakyReLU(0.1),
        nn.Flatten(),
        spectral_norm(nn.Linear(W * 8 * 8 * 8, 1)),
    )


device = "cuda" if torch.cuda.is_available() else "cpu"
G, D = gen().to(device), disc().to(device)
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.0, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.0, 0.9))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    real = torch.randn(B, 3, 64, 64, device=device)
    z = torch.randn(B, Z, 1, 1, device=device)
    fake = G(z)
    d_loss = F.relu(1.0 - D(real)).mean() + F.relu(1.0 + D(fake.detach())).mean()
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_d.step()
    g_loss = -D(fake).mean()
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()
    del real, z, fake, d_loss, g_loss
    if device == "cuda":
        print(f"iter {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
