"""An SNGAN as Miyato et al.'s DCGAN-style setup is written with PyTorch's parametrizations: a
generator of ConvTranspose2d layers with BatchNorm (a 128-dimensional z to 64 x 64 RGB, widths
1,024 / 512 / 256 / 128) and a discriminator of 3 x 3 and 4 x 4 convolutions with LeakyReLU(0.1),
every Conv2d and the final Linear wrapped in torch.nn.utils.parametrizations.spectral_norm (one
power iteration per forward in training); the hinge loss, two discriminator steps for each
generator step, Adam with betas (0.0, 0.9) and the two-timescale learning rates (4e-4 for D, 1e-4
for G); fp32, batch 512 of random "real" images; 3 iterations; then 2,048 samples drawn in chunks of
512 under no_grad with G in eval mode and scored by D in eval mode (the stored u, v, no power
iteration); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import spectral_norm

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15101)
NZ, GF, DF, B, ITERS, N_DIS, NSAMP, CHUNK = (
    (16, 8, 8, 4, 1, 2, 8, 4) if SMALL else (128, 128, 64, 512, 3, 2, 2048, 512)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.ConvTranspose2d(NZ, GF * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(GF * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(GF * 8, GF * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(GF * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(GF * 4, GF * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(GF * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(GF * 2, GF, 4, 2, 1, bias=False),
            nn.BatchNorm2d(GF),
            nn.ReLU(True),
            nn.ConvTranspose2d(GF, 3, 4, 2, 1),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.net(z.view(z.size(0), NZ, 1, 1))


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [(3, DF, 3, 1), (DF, DF, 4, 2), (DF, DF * 2, 3, 1), (DF * 2, DF * 2, 4, 2)]
        chans += [(DF * 2, DF * 4, 3, 1), (DF * 4, DF * 4, 4, 2), (DF * 4, DF * 8, 3, 1)]
        layers = []
        for cin, cout, k, s in chans:
            layers += [spectral_norm(nn.Conv2d(cin, cout, k, s, 1)), nn.LeakyReLU(0.1, inplace=True)]
        self.features = nn.Sequential(*layers)
        self.fc = spectral_norm(nn.Linear(DF * 8 * 8 * 8, 1))

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


G = Generator().to(device)
D = Discriminator().to(device)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
opt_d = torch.optim.Adam(D.parameters(), lr=4e-4, betas=(0.0, 0.9))
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

G.train()
D.train()
for it in range(ITERS):
    for _ in range(N_DIS):
        real = torch.rand(B, 3, 64, 64, device=device) * 2 - 1
        with torch.no_grad():
            fake = G(torch.randn(B, NZ, device=device))
        d_loss = F.relu(1.0 - D(real)).mean() + F.relu(1.0 + D(fake)).mean()
        opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        opt_d.step()
    fake = G(torch.randn(B, NZ, device=device))
    g_loss = -D(fake).mean()
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"iter {it} d {d_loss.item():.4f} g {g_loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del real, fake, d_loss, g_loss
G.eval()
D.eval()
scores = []
with torch.no_grad():
    for _ in range(NSAMP // CHUNK):
        imgs = G(torch.randn(CHUNK, NZ, device=device))
        scores.append(D(imgs).squeeze(1))
    scores = torch.cat(scores)
if device == "cuda":
    print(
        f"samples {scores.numel()} mean score {scores.mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
