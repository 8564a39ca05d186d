"""A convolutional VAE on 128x128 images (Conv2d encoder with BatchNorm, reparameterisation, ConvTranspose2d
decoder, sigmoid), BCE + KL loss, Adam, fp32, batch 128, 3 steps, with expandable segments set through
PYTORCH_CUDA_ALLOC_CONF before torch is imported; then sampling 256 images under no_grad."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SMALL = bool(os.environ.get("SMOKE"))
BATCH, SIZE, LATENT = (4, 32, 8) if SMALL else (128, 128, 256)
torch.manual_seed(1008)
device = "cuda" if torch.cuda.is_available() else "cpu"


def down(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 4, 2, 1), nn.BatchNorm2d(o), nn.LeakyReLU(0.2))


def up(i, o):
    return nn.Sequential(nn.ConvTranspose2d(i, o, 4, 2, 1), nn.BatchNorm2d(o), nn.ReLU())


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(down(3, 32), down(32, 64), down(64, 128), down(128, 256))
        self.side = SIZE // 16
        flat = 256 * self.side * self.side
        self.mu = nn.Linear(flat, LATENT)
        self.logvar = nn.Linear(flat, LATENT)
        self.expand = nn.Linear(LATENT, flat)
        self.dec = nn.Sequential(up(256, 128), up(128, 64), up(64, 32), nn.ConvTranspose2d(32, 3, 4, 2, 1))

    def decode(self, z):
        return torch.sigmoid(self.dec(self.expand(z).view(-1, 256, self.side, self.side)))

    def forward(self, x):
        h = self.enc(x).flatten(1)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decode(z), mu, logvar


model = VAE().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.rand(BATCH, 3, SIZE, SIZE, device=device)
    recon, mu, logvar = model(x)
    bce = F.binary_cross_entropy(recon, x, reduction="sum")
    kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    loss = (bce + kl) / BATCH
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad():
    samples = model.decode(torch.randn(2 * BATCH, LATENT, device=device))
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
