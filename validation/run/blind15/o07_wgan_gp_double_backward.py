"""WGAN-GP on 64 px images: a DCGAN-style generator (ConvTranspose2d + BatchNorm) and a critic (Conv2d +
LayerNorm over channels-height-width, LeakyReLU); the gradient penalty takes torch.autograd.grad of the
critic on interpolated images with create_graph=True and backpropagates through it (double backward);
5 critic steps per generator step, Adam(betas=(0, 0.9)) for both, fp32, batch 64, 2 generator steps."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1507)
BATCH, Z, CH = (2, 8, 4) if SMALL else (64, 128, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"

gen = nn.Sequential(
    nn.ConvTranspose2d(Z, CH * 8, 4, 1, 0, bias=False),
    nn.BatchNorm2d(CH * 8),
    nn.ReLU(True),
    nn.ConvTranspose2d(CH * 8, CH * 4, 4, 2, 1, bias=False),
    nn.BatchNorm2d(CH * 4),
    nn.ReLU(True),
    nn.ConvTranspose2d(CH * 4, CH * 2, 4, 2, 1, bias=False),
    nn.BatchNorm2d(CH * 2),
    nn.ReLU(True),
    nn.ConvTranspose2d(CH * 2, CH, 4, 2, 1, bias=False),
    nn.BatchNorm2d(CH),
    nn.ReLU(True),
    nn.ConvTranspose2d(CH, 3, 4, 2, 1, bias=False),
    nn.Tanh(),
).to(device)
critic = nn.Sequential(
    nn.Conv2d(3, CH, 4, 2, 1),
    nn.LeakyReLU(0.2),
    nn.Conv2d(CH, CH * 2, 4, 2, 1),
    nn.LayerNorm([CH * 2, 16, 16]),
    nn.LeakyReLU(0.2),
    nn.Conv2d(CH * 2, CH * 4, 4, 2, 1),
    nn.LayerNorm([CH * 4, 8, 8]),
    nn.LeakyReLU(0.2),
    nn.Conv2d(CH * 4, CH * 8, 4, 2, 1),
    nn.LayerNorm([CH * 8, 4, 4]),
    nn.LeakyReLU(0.2),
    nn.Conv2d(CH * 8, 1, 4, 1, 0),
).to(device)
opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.0, 0.9))
opt_c = torch.optim.Adam(critic.parameters(), lr=1e-4, betas=(0.0, 0.9))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _ in range(5):
        real = torch.randn(BATCH, 3, 64, 64, device=device)
        fake = gen(torch.randn(BATCH, Z, 1, 1, device=device)).detach()
        eps = torch.rand(BATCH, 1, 1, 1, device=device)
        mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
        grad = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)[0]
        penalty = ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
        loss_c = critic(fake).mean() - critic(real).mean() + 10 * penalty
        opt_c.zero_grad(set_to_none=True)
        loss_c.backward()
        opt_c.step()
    loss_g = -critic(gen(torch.randn(BATCH, Z, 1, 1, device=device))).mean()
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
