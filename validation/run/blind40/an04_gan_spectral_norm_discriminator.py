"""GAN training with a spectrally normalised discriminator (torch.nn.utils.parametrizations.
spectral_norm on every conv and linear layer) and a transposed-conv generator, hinge loss, two
Adam optimizers, the fake batch detached for the discriminator step, fp32, batch 64 at 64x64,
2 iterations; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4004)
B, Z, C = (2, 8, 8) if SMALL else (64, 128, 64)


def gen():
    return nn.Sequential(
        nn.ConvTranspose2d(Z, C * 8, 4, 1, 0),
        nn.BatchNorm2d(C * 8),
        nn.ReLU(),
        nn.ConvTranspose2d(C * 8, C * 4, 4, 2, 1),
        nn.BatchNorm2d(C * 4),
        nn.ReLU(),
        nn.ConvTranspose2d(C * 4, C * 2, 4, 2, 1),
        nn.BatchNorm2d(C * 2),
        nn.ReLU(),
        nn.ConvTranspose2d(C * 2, C, 4, 2, 1),
        nn.BatchNorm2d(C),
        nn.ReLU(),
        nn.ConvTranspose2d(C, 3, 4, 2, 1),
        nn.Tanh(),
    )


def disc():
    return nn.Sequential(
        spectral_norm(nn.Conv2d(3, C, 4, 2, 1)),
        nn.LeakyReLU(0.1),
        spectral_norm(nn.Conv2d(C, C * 2, 4, 2, 1)),
        nn.LeakyReLU(0.1),
        spectral_norm(nn.Conv2d(C * 2, C * 4, 4, 2, 1)),
        nn.LeakyReLU(0.1),
        spectral_norm(nn.Conv2d(C * 4, C * 8, 4, 2, 1)),
        nn.LeakyReLU(0.1),
        nn.Flatten(),
        spectral_norm(nn.Linear(C * 8 * 16, 1)),
    )


device = "cuda" if torch.cuda.is_available() else "cpu"
G, D = gen().to(device), disc().to(device)
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.0, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.0, 0.9))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for it in range(2):
    real = torch.randn(B, 3, 64, 64, device=device)
    fake = G(torch.randn(B, Z, 1, 1, device=device))
    d_loss = F.relu(1 - D(real)).mean() + F.relu(1 + D(fake.detach())).mean()
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_d.step()
    g_loss = -D(fake).mean()
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()
    del real, fake, d_loss, g_loss
    if device == "cuda":
        print(f"iter {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
