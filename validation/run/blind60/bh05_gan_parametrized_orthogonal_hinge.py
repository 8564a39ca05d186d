"""A GAN written by hand on 64x64 images: a generator of transposed convolutions with BatchNorm and
a discriminator whose convolutions carry torch.nn.utils.parametrizations.spectral_norm and whose
linear head is kept orthogonal by parametrizations.orthogonal; hinge losses, two Adam optimizers
with different learning rates (TTUR), two discriminator steps per generator step, batch 64, fp32,
2 iterations; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6005)
B, Z, C = (2, 8, 8) if SMALL else (64, 128, 64)

G = nn.Sequential(
    nn.ConvTranspose2d(Z, 8 * C, 4, 1, 0, bias=False),
    nn.BatchNorm2d(8 * C),
    nn.ReLU(),
    nn.ConvTranspose2d(8 * C, 4 * C, 4, 2, 1, bias=False),
    nn.BatchNorm2d(4 * C),
    nn.ReLU(),
    nn.ConvTranspose2d(4 * C, 2 * C, 4, 2, 1, bias=False),
    nn.BatchNorm2d(2 * C),
    nn.ReLU(),
    nn.ConvTranspose2d(2 * C, C, 4, 2, 1, bias=False),
    nn.BatchNorm2d(C),
    nn.ReLU(),
    nn.ConvTranspose2d(C, 3, 4, 2, 1),
    nn.Tanh(),
)


def sn(m):
    return parametrizations.spectral_norm(m)


D = nn.Sequential(
    sn(nn.Conv2d(3, C, 4, 2, 1)),
    nn.LeakyReLU(0.2),
    sn(nn.Conv2d(C, 2 * C, 4, 2, 1)),
    nn.LeakyReLU(0.2),
    sn(nn.Conv2d(2 * C, 4 * C, 4, 2, 1)),
    nn.LeakyReLU(0.2),
    sn(nn.Conv2d(4 * C, 8 * C, 4, 2, 1)),
    nn.LeakyReLU(0.2),
    nn.Flatten(),
    parametrizations.orthogonal(nn.Linear(8 * C * 16, 8 * C * 16 // 8)),
    nn.LeakyReLU(0.2),
    nn.Linear(8 * C * 16 // 8, 1),
)
device = "cuda" if torch.cuda.is_available() else "cpu"
G, D = G.to(device), D.to(device)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=4e-4, betas=(0.0, 0.9))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for it in range(2):
    for _ in range(2):
        real = torch.rand(B, 3, 64, 64, device=device) * 2 - 1
        with torch.no_grad():
            fake = G(torch.randn(B, Z, 1, 1, device=device))
        loss_d = F.relu(1 - D(real)).mean() + F.relu(1 + D(fake)).mean()
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        del real, fake, loss_d
    loss_g = -D(G(torch.randn(B, Z, 1, 1, device=device))).mean()
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    del loss_g
    if device == "cuda":
        print(f"iter {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
