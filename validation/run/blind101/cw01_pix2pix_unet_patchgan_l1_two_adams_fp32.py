"""pix2pix image-to-image GAN: a U-Net generator (8 stride-2 conv downs, ConvTranspose2d ups with
skip concatenations, BatchNorm, dropout in the first three ups) and a 70x70 PatchGAN discriminator
on the concatenated (input, output) pair; BCE-with-logits adversarial loss plus 100 x L1, two Adam
optimizers (betas 0.5, 0.999), the discriminator stepped on a detached fake first; batch 8 of
256 x 256 RGB pairs made on the GPU (edge maps of random blobs), fp32, 3 steps, then a no_grad
evaluation of 16 images in eval mode; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10101)
B, R, NGF, STEPS = (2, 32, 8, 2) if SMALL else (8, 256, 64, 3)
DEPTH = 5 if SMALL else 8
device = "cuda" if torch.cuda.is_available() else "cpu"


class Down(nn.Module):
    def __init__(self, cin, cout, norm=True):
        super().__init__()
        layers = [nn.Conv2d(cin, cout, 4, 2, 1, bias=not norm)]
        if norm:
            layers.append(nn.BatchNorm2d(cout))
        layers.append(nn.LeakyReLU(0.2, inplace=True))
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return self.block(x)


class Up(nn.Module):
    def __init__(self, cin, cout, dropout=False):
        super().__init__()
        layers = [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout)]
        if dropout:
            layers.append(nn.Dropout(0.5))
        layers.append(nn.ReLU(inplace=True))
        self.block = nn.Sequential(*layers)

    def forward(self, x, skip):
        return torch.cat([self.block(x), skip], dim=1)


class UNetGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [NGF, NGF * 2, NGF * 4] + [NGF * 8] * (DEPTH - 3)
        self.downs = nn.ModuleList()
        cin = 3
        for i, c in enumerate(chans):
            self.downs.append(Down(cin, c, norm=0 < i < DEPTH - 1))
            cin = c
        self.ups = nn.ModuleList()
        for i in range(DEPTH - 1):
            c_skip = chans[DEPTH - 2 - i]
            c_in = chans[-1] if i == 0 else chans[DEPTH - 1 - i] * 2
            self.ups.append(Up(c_in, c_skip, dropout=i < 3))
        self.final = nn.ConvTranspose2d(chans[0] * 2, 3, 4, 2, 1)

    def forward(self, x):
        skips = []
        for d in self.downs:
            x = d(x)
            skips.append(x)
        x = skips.pop()
        for u in self.ups:
            x = u(x, skips.pop())
        return torch.tanh(self.final(x))


class PatchGAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(6, 64, 4, 2, 1),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(64, 128, 4, 2, 1, bias=False),
            nn.BatchNorm2d(128),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(128, 256, 4, 2, 1, bias=False),
            nn.BatchNorm2d(256),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(256, 512, 4, 1, 1, bias=False),
            nn.BatchNorm2d(512),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(512, 1, 4, 1, 1),
        )

    def forward(self, a, b):
        return self.net(torch.cat([a, b], dim=1))


def make_pairs(n):
    target = torch.tanh(
        F.interpolate(torch.randn(n, 3, R // 16, R // 16, device=device), size=R, mode="bicubic")
    )
    gray = target.mean(1, keepdim=True)
    gx = gray[..., :, 1:] - gray[..., :, :-1]
    gy = gray[..., 1:, :] - gray[..., :-1, :]
    edges = F.pad(gx, (0, 1)).abs() + F.pad(gy, (0, 0, 0, 1)).abs()
    edges = (edges > edges.mean()).float() * 2 - 1
    return edges.expand(-1, 3, -1, -1).contiguous(), target


G = UNetGenerator().to(device)
D = PatchGAN().to(device)
opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    src, tgt = make_pairs(B)
    fake = G(src)
    d_real = D(src, tgt)
    d_fake = D(src, fake.detach())
    loss_d = 0.5 * (bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake)))
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    d_fake = D(src, fake)
    loss_g = bce(d_fake, torch.ones_like(d_fake)) + 100.0 * F.l1_loss(fake, tgt)
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    if device == "cuda":
        print(
            f"step {step} d {loss_d.item():.3f} g {loss_g.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del src, tgt, fake, d_real, d_fake, loss_d, loss_g
G.eval()
with torch.no_grad():
    src, tgt = make_pairs(16)
    out = G(src)
    l1 = F.l1_loss(out, tgt)
if device == "cuda":
    print(
        f"eval l1 {l1.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
