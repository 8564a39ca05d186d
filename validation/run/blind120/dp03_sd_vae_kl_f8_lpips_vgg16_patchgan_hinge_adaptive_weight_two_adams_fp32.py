"""Stable Diffusion's first-stage autoencoder (KL-f8) trained as CompVis/latent-diffusion trains it,
written by hand: the Encoder/Decoder of ldm/modules/diffusionmodules/model.py (ch 128, ch_mult
1/2/4/4, 2 ResnetBlocks per level, GroupNorm 32, swish, a mid block with one single-head attention,
4 latent channels, a diagonal Gaussian posterior) and LPIPSWithDiscriminator: an LPIPS-style
perceptual distance over a frozen torchvision VGG16 (random weights; unit-normalized features at
five ReLUs, 1x1 linear heads), a learned log-variance, the KL term, a 3-layer PatchGAN discriminator
with BatchNorm under hinge loss and the adaptive generator weight from autograd.grad of both losses
against the decoder's last conv weight; two Adams (generator, discriminator) alternating each step,
batch 4 at 256 x 256 in fp32, 3 steps; then reconstruction of 8 images from the posterior's mode
under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12003)
CH, B, RES, BE = (32, 1, 64, 2) if SMALL else (128, 4, 256, 8)
MULT, ZC = (1, 2, 4, 4), 4
device = "cuda" if torch.cuda.is_available() else "cpu"


def Norm(c):
    return nn.GroupNorm(32 if c % 32 == 0 else 8, c, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1, self.conv1 = Norm(cin), nn.Conv2d(cin, cout, 3, 1, 1)
        self.norm2, self.dropout, self.conv2 = Norm(cout), nn.Dropout(0.0), nn.Conv2d(cout, cout, 3, 1, 1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.nin_shortcut(x) + h


class AttnBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = Norm(c)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x):
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        b, c, hh, ww = q.shape
        q = q.reshape(b, c, hh * ww).permute(0, 2, 1)
        w_ = torch.bmm(q, k.reshape(b, c, hh * ww)) * (int(c) ** (-0.5))
        w_ = F.softmax(w_, dim=2)
        h = torch.bmm(v.reshape(b, c, hh * ww), w_.permute(0, 2, 1)).reshape(b, c, hh, ww)
        return x + self.proj_out(h)


class Downsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 2, 0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1), mode="constant", value=0))


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(3, CH, 3, 1, 1)
        self.down = nn.ModuleList()
        cin = CH
        for i, m in enumerate(MULT):
            blocks = nn.ModuleList()
            for _ in range(2):
                blocks.append(ResnetBlock(cin, CH * m))
                cin = CH * m
            level = nn.Module()
            level.block = blocks
            level.downsample = Downsample(cin) if i != len(MULT) - 1 else nn.Identity()
            self.down.append(level)
        self.mid = nn.ModuleList([ResnetBlock(cin, cin), AttnBlock(cin), ResnetBlock(cin, cin)])
        self.norm_out, self.conv_out = Norm(cin), nn.Conv2d(cin, 2 * ZC, 3, 1, 1)

    def forward(self, x):
        h = self.conv_in(x)
        for level in self.down:
            for blk in level.block:
                h = blk(h)
            h = level.downsample(h)
        for m in self.mid:
            h = m(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        cin = CH * MULT[-1]
        self.conv_in = nn.Conv2d(ZC, cin, 3, 1, 1)
        self.mid = nn.ModuleList([ResnetBlock(cin, cin), AttnBlock(cin), ResnetBlock(cin, cin)])
        self.up = nn.ModuleList()
        for i, m in reversed(list(enumerate(MULT))):
            blocks = nn.ModuleList()
            for _ in range(3):
                blocks.append(ResnetBlock(cin, CH * m))
                cin = CH * m
            level = nn.Module()
            level.block = blocks
            level.upsample = Upsample(cin) if i != 0 else nn.Identity()
            self.up.append(level)
        self.norm_out, self.conv_out = Norm(cin), nn.Conv2d(cin, 3, 3, 1, 1)

    def forward(self, z):
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for level in self.up:
            for blk in level.block:
                h = blk(h)
            h = level.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class AutoencoderKL(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = Encoder(), Decoder()
        self.quant_conv, self.post_quant_conv = nn.Conv2d(2 * ZC, 2 * ZC, 1), nn.Conv2d(ZC, ZC, 1)

    def encode(self, x):
        mean, logvar = torch.chunk(self.quant_conv(self.encoder(x)), 2, dim=1)
        return mean, torch.clamp(logvar, -30.0, 20.0)

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))


class LPIPS(nn.Module):
    def __init__(self):
        super().__init__()
        feats = torchvision.models.vgg16(weights=None).features
        self.slices = nn.ModuleList([feats[:4], feats[4:9], feats[9:16], feats[16:23], feats[23:30]])
        self.lins = nn.ModuleList(
            nn.Sequential(nn.Dropout(), nn.Conv2d(c, 1, 1, bias=False)) for c in (64, 128, 256, 512, 512)
        )
        self.register_buffer("shift", torch.tensor([-0.030, -0.088, -0.188])[None, :, None, None])
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450])[None, :, None, None])
        self.requires_grad_(False)

    def forward(self, x, y):
        hx, hy = (x - self.shift) / self.scale, (y - self.shift) / self.scale
        val = 0
        for s, lin in zip(self.slices, self.lins, strict=True):
            hx, hy = s(hx), s(hy)
            nx = hx / (torch.sqrt(torch.sum(hx**2, dim=1, keepdim=True)) + 1e-10)
            ny = hy / (torch.sqrt(torch.sum(hy**2, dim=1, keepdim=True)) + 1e-10)
            val = val + lin((nx - ny) ** 2).mean([2, 3], keepdim=True)
        return val


def patchgan(ndf=64, n_layers=3):
    layers = [nn.Conv2d(3, ndf, 4, 2, 1), nn.LeakyReLU(0.2, True)]
    mult = 1
    for n in range(1, n_layers + 1):
        prev, mult = mult, min(2**n, 8)
        layers += [
            nn.Conv2d(ndf * prev, ndf * mult, 4, 2 if n < n_layers else 1, 1, bias=False),
            nn.BatchNorm2d(ndf * mult),
            nn.LeakyReLU(0.2, True),
        ]
    layers.append(nn.Conv2d(ndf * mult, 1, 4, 1, 1))
    return nn.Sequential(*layers)


vae, lpips, disc = AutoencoderKL().to(device), LPIPS().to(device).eval(), patchgan().to(device)
logvar = nn.Parameter(torch.zeros((), device=device))
opt_ae = torch.optim.Adam([*vae.parameters(), logvar], lr=4.5e-6, betas=(0.5, 0.9))
opt_disc = torch.optim.Adam(disc.parameters(), lr=4.5e-6, betas=(0.5, 0.9))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, 3, RES, RES, device=device).clamp_(-1, 1)
    mean, lv = vae.encode(x)
    z = mean + torch.exp(0.5 * lv) * torch.randn_like(mean)
    xrec = vae.decode(z)
    rec = torch.abs(x.contiguous() - xrec.contiguous()) + 1.0 * lpips(x.contiguous(), xrec.contiguous())
    nll = torch.sum(rec / torch.exp(logvar) + logvar) / B
    kl = torch.sum(0.5 * (mean.pow(2) + torch.exp(lv) - 1.0 - lv), dim=[1, 2, 3]).sum() / B
    g_loss = -torch.mean(disc(xrec.contiguous()))
    last = vae.decoder.conv_out.weight
    nll_grads = torch.autograd.grad(nll, last, retain_graph=True)[0]
    g_grads = torch.autograd.grad(g_loss, last, retain_graph=True)[0]
    d_weight = (torch.norm(nll_grads) / (torch.norm(g_grads) + 1e-4)).clamp(0.0, 1e4).detach() * 0.5
    loss = nll + 1e-6 * kl + d_weight * g_loss
    opt_ae.zero_grad(set_to_none=True)
    loss.backward()
    opt_ae.step()
    logits_real, logits_fake = disc(x.detach()), disc(xrec.detach())
    d_loss = 0.5 * (torch.mean(F.relu(1.0 - logits_real)) + torch.mean(F.relu(1.0 + logits_fake)))
    opt_disc.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_disc.step()
    if device == "cuda":
        print(
            f"step {step} ae {loss.item():.2f} d {d_loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, mean, lv, z, xrec, rec, nll, kl, g_loss, nll_grads, g_grads, loss, logits_real, logits_fake, d_loss

vae.eval()
with torch.no_grad():
    x = torch.randn(BE, 3, RES, RES, device=device).clamp_(-1, 1)
    mean, _ = vae.encode(x)
    xrec = vae.decode(mean).clamp(-1, 1)
    mse = F.mse_loss(xrec, x)
if device == "cuda":
    print(
        f"eval mse {mse.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
