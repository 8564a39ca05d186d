"""Convolutional VAE on 128 x 128 RGB images: encoder Conv2d(k4, s2) + BatchNorm2d + LeakyReLU down to 8 x 8,
flattened to mu/logvar heads (latent 256), reparameterization with `torch.randn_like`, decoder Linear then
ConvTranspose2d(k4, s2, p1) + BatchNorm2d + ReLU up to 128 x 128; BCE-with-logits reconstruction (sum) +
KL divergence, fp32, Adam, batch 768, 3 steps; then `no_grad` sampling of 1536 images from the prior."""

import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

IMG, LATENT, WIDTH, B = (32, 16, 8, 4) if os.environ.get("SMOKE") else (128, 256, 64, 768)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(604)


def down(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2))


def up(cin, cout):
    return nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [3, WIDTH, 2 * WIDTH, 4 * WIDTH, 8 * WIDTH]
        self.encoder = nn.Sequential(*[down(a, b) for a, b in itertools.pairwise(chans)])
        self.side = IMG // 16
        flat = chans[-1] * self.side * self.side
        self.mu = nn.Linear(flat, LATENT)
        self.logvar = nn.Linear(flat, LATENT)
        self.project = nn.Linear(LATENT, flat)
        rev = chans[::-1]
        self.decoder = nn.Sequential(*[up(a, b) for a, b in itertools.pairwise(rev[:-1])])
        self.to_rgb = nn.ConvTranspose2d(rev[-2], 3, 4, 2, 1)
        self.top = chans[-1]

    def decode(self, z):
        h = self.project(z).view(z.shape[0], self.top, self.side, self.side)
        return self.to_rgb(self.decoder(h))

    def forward(self, x):
        h = self.encoder(x).flatten(1)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.5, 0.999))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = torch.rand(B, 3, IMG, IMG, device=device)
    recon, mu, logvar = model(x)
    rec = F.binary_cross_entropy_with_logits(recon, x, reduction="sum") / B
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / B
    loss = rec + kl
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.1f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    samples = torch.sigmoid(model.decode(torch.randn(2 * B, LATENT, device=device)))
    print(f"samples {tuple(samples.shape)} mean {samples.mean().item():.3f}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
