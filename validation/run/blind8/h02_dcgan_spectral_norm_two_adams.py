"""DCGAN at 64 x 64: a generator of ConvTranspose2d + BatchNorm2d + ReLU (latent 128), a discriminator of
Conv2d + LeakyReLU wrapped in `torch.nn.utils.parametrizations.spectral_norm`, BCE with logits, one Adam
per network (betas 0.5, 0.999), batch 128, 3 alternating D/G iterations with `fake.detach()`."""

import os

import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

SMALL = bool(os.environ.get("SMOKE"))
BATCH, NF = (4, 8) if SMALL else (128, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(802)


def up(cin, cout, first=False):
    return [nn.ConvTranspose2d(cin, cout, 4, 1 if first else 2, 0 if first else 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True)]


generator = nn.Sequential(
    *up(128, NF * 8, first=True),
    *up(NF * 8, NF * 4),
    *up(NF * 4, NF * 2),
    *up(NF * 2, NF),
    nn.ConvTranspose2d(NF, 3, 4, 2, 1, bias=False),
    nn.Tanh(),
).to(device)
discriminator = nn.Sequential(
    spectral_norm(nn.Conv2d(3, NF, 4, 2, 1)),
    nn.LeakyReLU(0.2, True),
    spectral_norm(nn.Conv2d(NF, NF * 2, 4, 2, 1)),
    nn.LeakyReLU(0.2, True),
    spectral_norm(nn.Conv2d(NF * 2, NF * 4, 4, 2, 1)),
    nn.LeakyReLU(0.2, True),
    spectral_norm(nn.Conv2d(NF * 4, NF * 8, 4, 2, 1)),
    nn.LeakyReLU(0.2, True),
    spectral_norm(nn.Conv2d(NF * 8, 1, 4, 1, 0)),
    nn.Flatten(),
).to(device)
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for it in range(3):
    real = torch.randn(BATCH, 3, 64, 64, device=device)
    fake = generator(torch.randn(BATCH, 128, 1, 1, device=device))
    ones = torch.ones(BATCH, 1, device=device)
    zeros = torch.zeros(BATCH, 1, device=device)
    loss_d = bce(discriminator(real), ones) + bce(discriminator(fake.detach()), zeros)
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    loss_g = bce(discriminator(fake), ones)
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    if device == "cuda":
        print(f"iter {it} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
