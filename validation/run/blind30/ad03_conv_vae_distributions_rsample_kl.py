"""A convolutional VAE on 64x64 images written with torch.distributions: the encoder gives a
Normal posterior (softplus scale), rsample() draws z, the loss is a Bernoulli log-likelihood
(logits) plus kl_divergence against a standard Normal prior; fp32, batch 128, Adam, 2 steps;
3 phases."""

import os

import torch
import torch.nn as nn
from torch.distributions import Bernoulli, Independent, Normal, kl_divergence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3003)
B, Z = (4, 8) if SMALL else (128, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2, 1),
            nn.ReLU(),
            nn.Conv2d(64, 128, 4, 2, 1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(128 * 8 * 8, 2 * Z),
        )
        self.dec_in = nn.Linear(Z, 128 * 8 * 8)
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(128, 64, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(64, 32, 4, 2, 1),
            nn.ReLU(),
            nn.ConvTranspose2d(32, 1, 4, 2, 1),
        )

    def forward(self, x):
        mu, s = self.enc(x).chunk(2, dim=1)
        q = Independent(Normal(mu, nn.functional.softplus(s) + 1e-4), 1)
        z = q.rsample()
        logits = self.dec(self.dec_in(z).view(-1, 128, 8, 8))
        rec = Independent(Bernoulli(logits=logits), 3).log_prob(x)
        prior = Independent(Normal(torch.zeros_like(mu), torch.ones_like(mu)), 1)
        return (kl_divergence(q, prior) - rec).mean()


model = VAE().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = (torch.rand(B, 1, 64, 64, device=device) > 0.5).float()
    loss = model(x)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
