"""FactorVAE (Kim & Mnih 2018) on dSprites-like 64x64 binary images, as in the paper's reference
implementations: a conv encoder (4 stride-2 4x4 convs, ReLU) to a 10-dimensional Gaussian latent, a
transposed-conv decoder with a Bernoulli likelihood (binary_cross_entropy_with_logits, reduction sum per
image), and a 6-layer MLP discriminator (LeakyReLU 0.2, width 1000) that tells q(z) samples from
permute_dims(z) (each latent dimension shuffled across the batch by its own torch.randperm, gathered and
stacked); the VAE loss adds gamma * (D(z)[:, 0] - D(z)[:, 1]), the discriminator is trained with
cross-entropy on z.detach() from a second batch and its permutation, two Adam optimizers (betas 0.9/0.999
and 0.5/0.9), bf16 autocast; then latent traversals: for 8 seed images, each of the 10 dimensions swept
over torch.linspace(-3, 3, 10) (a 8 x 10 x 10 grid of codes built by broadcasting) and decoded under
no_grad in chunks, sigmoid to probabilities.

Phases: 0 models and optimizers; 1 first VAE + discriminator step; 2 three more steps;
3 encoding the seed images; 4 traversal decode."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(30403)
device = "cuda" if torch.cuda.is_available() else "cpu"
Z, B, STEPS, GAMMA = (10, 8, 2, 6.4) if SMALL else (10, 512, 4, 6.4)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(32, 64, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(64, 64, 4, 2, 1),
            nn.ReLU(True),
            nn.Conv2d(64, 128, 4, 1),
            nn.ReLU(True),
            nn.Conv2d(128, 2 * Z, 1),
        )
        self.dec = nn.Sequential(
            nn.Conv2d(Z, 128, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(128, 64, 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(64, 64, 4, 2, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(64, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 32, 4, 2, 1),
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 1, 4, 2, 1),
        )

    def encode(self, x):
        mu, logvar = self.enc(x).flatten(1).chunk(2, dim=1)
        return mu, logvar

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z[..., None, None]), mu, logvar, z


def discriminator():
    layers, w = [], Z
    for _ in range(5):
        layers += [nn.Linear(w, 1000), nn.LeakyReLU(0.2, True)]
        w = 1000
    layers.append(nn.Linear(1000, 2))
    return nn.Sequential(*layers)


def permute_dims(z):
    n = z.size(0)
    return torch.stack([z[torch.randperm(n, device=z.device), j] for j in range(z.size(1))], dim=1)


def make_images(n):
    # sprite-like blobs: thresholded smooth noise
    base = F.interpolate(torch.rand(n, 1, 8, 8, device=device), size=64, mode="bicubic", align_corners=False)
    return (base > 0.6).float()


vae = VAE().to(device)
disc = discriminator().to(device)
opt_vae = torch.optim.Adam(vae.parameters(), lr=1e-4, betas=(0.9, 0.999))
opt_d = torch.optim.Adam(disc.parameters(), lr=1e-4, betas=(0.5, 0.9))
ones = torch.ones(B, dtype=torch.long, device=device)
zeros = torch.zeros(B, dtype=torch.long, device=device)
report("setup")

for step in range(STEPS):
    x1, x2 = make_images(B), make_images(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits, mu, logvar, z = vae(x1)
        recon = F.binary_cross_entropy_with_logits(logits.float(), x1, reduction="sum") / B
        kld = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(1)).mean()
        d_z = disc(z)
        tc = (d_z[:, 0] - d_z[:, 1]).float().mean()
        vae_loss = recon + kld + GAMMA * tc
    opt_vae.zero_grad(set_to_none=True)
    vae_loss.backward(retain_graph=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        _, _, _, z2 = vae(x2)
        z_perm = permute_dims(z2).detach()
        d_loss = 0.5 * (F.cross_entropy(d_z.float(), zeros) + F.cross_entropy(disc(z_perm).float(), ones))
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_vae.step()
    opt_d.step()
    print(
        f"step {step} recon {recon.item():.2f} kld {kld.item():.3f} tc {tc.item():.4f} d {d_loss.item():.4f}"
    )
    del x1, x2, logits, mu, logvar, z, recon, kld, d_z, tc, vae_loss, z2, z_perm, d_loss
    if step == 0:
        report("step0")
report("steps")

vae.eval()
with torch.no_grad():
    seeds = make_images(8)
    mu, _ = vae.encode(seeds)
report("encode")

with torch.no_grad():
    vals = torch.linspace(-3, 3, 10, device=device)
    codes = mu[:, None, None, :].repeat(1, Z, 10, 1)  # (8, Z, 10, Z)
    eye = torch.eye(Z, device=device, dtype=torch.bool)[None, :, None, :]
    codes = torch.where(eye, vals[None, None, :, None], codes).reshape(-1, Z)
    frames = torch.cat([torch.sigmoid(vae.dec(c[..., None, None])) for c in codes.split(200)])
    print("traversal", tuple(frames.shape), f"{frames.mean().item():.4f}")
report("traverse")
