"""A MAGVIT-v2-style image tokenizer with lookup-free quantization (LFQ) written from the paper: a
convolutional encoder of GroupNorm/SiLU residual blocks from 128 x 128 to a 16 x 16 grid of 14
latent bits, the quantizer taking each bit's sign with a straight-through estimator, its entropy
loss (per-token entropy minus the batch codebook entropy) from the softmax of the tokens'
affinities to all 2^14 codes, a commitment loss, and the token index from the bits; a mirrored
decoder with nearest upsampling; a PatchGAN discriminator (BatchNorm, LeakyReLU) with hinge loss
and LeCam regularisation against EMAs of its outputs; the generator's adversarial weight adapted
from the ratio of the reconstruction and GAN gradients at the decoder's last layer
(torch.autograd.grad, retain_graph); bf16 autocast, Adam for each network; then tokenizing a held-
out batch and decoding the tokens back through the codebook bits; batch 16, 2 steps, 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12703)
B, RES, CH, BITS = (2, 32, 16, 6) if SMALL else (16, 128, 128, 14)
MULTS = (1, 2, 2, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.n1 = nn.GroupNorm(32 if cin % 32 == 0 else 8, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.n2 = nn.GroupNorm(32 if cout % 32 == 0 else 8, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.sc = nn.Conv2d(cin, cout, 1, bias=False) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        h = self.c2(F.silu(self.n2(h)))
        return h + self.sc(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, CH, 3, padding=1, bias=False)
        layers, c = [], CH
        for i, m in enumerate(MULTS):
            layers += [ResBlock(c, CH * m), ResBlock(CH * m, CH * m)]
            c = CH * m
            if i < len(MULTS) - 1:
                layers.append(nn.Conv2d(c, c, 4, stride=2, padding=1))
        self.body = nn.Sequential(*layers)
        self.out = nn.Sequential(nn.GroupNorm(32 if c % 32 == 0 else 8, c), nn.SiLU(), nn.Conv2d(c, BITS, 1))

    def forward(self, x):
        return self.out(self.body(self.stem(x)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        c = CH * MULTS[-1]
        self.stem = nn.Conv2d(BITS, c, 3, padding=1)
        layers = []
        for i, m in enumerate(reversed(MULTS)):
            layers += [ResBlock(c, CH * m), ResBlock(CH * m, CH * m)]
            c = CH * m
            if i < len(MULTS) - 1:
                layers += [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(c, c, 3, padding=1)]
        self.body = nn.Sequential(*layers)
        self.norm = nn.GroupNorm(32 if c % 32 == 0 else 8, c)
        self.last = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, z):
        return self.last(F.silu(self.norm(self.body(self.stem(z)))))


class LFQ(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", 2 ** torch.arange(BITS - 1, -1, -1), persistent=False)
        codes = ((torch.arange(2**BITS)[:, None] & self.mask) != 0).float() * 2 - 1
        self.register_buffer("codebook", codes, persistent=False)

    def forward(self, z, temp=0.01):
        z = z.float()
        q = torch.where(z > 0, torch.ones_like(z), -torch.ones_like(z))
        idx = ((q > 0).long() * self.mask[None, :, None, None]).sum(1)
        q = z + (q - z).detach()
        flat = z.permute(0, 2, 3, 1).reshape(-1, BITS)
        logits = 2 * flat @ self.codebook.t() / temp
        prob = logits.softmax(-1)
        per_sample = -(prob * logits.log_softmax(-1)).sum(-1).mean()
        avg = prob.mean(0)
        codebook_ent = -(avg * avg.clamp_min(1e-8).log()).sum()
        commit = F.mse_loss(z, q.detach())
        return q, idx, per_sample - codebook_ent, commit

    def indices_to_codes(self, idx):
        return self.codebook[idx].permute(0, 3, 1, 2)


class PatchGAN(nn.Module):
    def __init__(self, nf=64, n=3):
        super().__init__()
        layers = [nn.Conv2d(3, nf, 4, 2, 1), nn.LeakyReLU(0.2)]
        c = nf
        for i in range(1, n + 1):
            co = nf * min(2**i, 8)
            layers += [
                nn.Conv2d(c, co, 4, 2 if i < n else 1, 1, bias=False),
                nn.BatchNorm2d(co),
                nn.LeakyReLU(0.2),
            ]
            c = co
        layers.append(nn.Conv2d(c, 1, 4, 1, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


enc, dec, quant, disc = Encoder().to(device), Decoder().to(device), LFQ().to(device), PatchGAN().to(device)
opt_ae = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=1e-4, betas=(0.5, 0.9))
opt_d = torch.optim.Adam(disc.parameters(), lr=1e-4, betas=(0.5, 0.9))
ema_real = torch.zeros((), device=device)
ema_fake = torch.zeros((), device=device)
images = torch.rand(4 * B, 3, RES, RES, device=device) * 2 - 1
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    x = images[torch.randint(0, 4 * B, (B,), device=device)]
    with torch.autocast(device, dtype=torch.bfloat16):
        z = enc(x)
    q, idx, ent, commit = quant(z)
    with torch.autocast(device, dtype=torch.bfloat16):
        rec = dec(q)
        g_adv = -disc(rec).float().mean()
    rec_loss = (rec.float() - x).abs().mean()
    last = dec.last.weight
    g_rec = torch.autograd.grad(rec_loss, last, retain_graph=True)[0]
    g_gan = torch.autograd.grad(g_adv, last, retain_graph=True)[0]
    weight = (g_rec.norm() / (g_gan.norm() + 1e-4)).clamp(0, 1e4).detach()
    loss = rec_loss + 0.1 * ent + 0.25 * commit + 0.1 * weight * g_adv
    opt_ae.zero_grad(set_to_none=True)
    loss.backward()
    opt_ae.step()
    if device == "cuda":
        print(
            f"step {step} ae loss {loss.item():.4f} weight {weight.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del z, q, ent, commit, g_adv, g_rec, g_gan, loss
    with torch.autocast(device, dtype=torch.bfloat16):
        d_real = disc(x).float()
        d_fake = disc(rec.detach()).float()
    loss_d = F.relu(1 - d_real).mean() + F.relu(1 + d_fake).mean()
    lecam = F.relu(d_real - ema_fake).pow(2).mean() + F.relu(ema_real - d_fake).pow(2).mean()
    loss_d = loss_d + 0.001 * lecam
    opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    opt_d.step()
    with torch.no_grad():
        ema_real.lerp_(d_real.mean(), 0.01)
        ema_fake.lerp_(d_fake.mean(), 0.01)
    if device == "cuda":
        print(
            f"step {step} d loss {loss_d.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, rec, d_real, d_fake, loss_d, lecam

enc.eval(), dec.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    held = torch.rand(2 * B, 3, RES, RES, device=device) * 2 - 1
    _, tokens, _, _ = quant(enc(held))
    recon = dec(quant.indices_to_codes(tokens))
    psnr = -10 * torch.log10(((recon.float() - held) ** 2).mean() / 4)
    used = torch.bincount(tokens.flatten(), minlength=2**BITS).gt(0).sum()
if device == "cuda":
    print(
        f"tokens {tokens.shape[1] * tokens.shape[2]} used {used.item()} psnr {psnr.item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke tokens {tuple(tokens.shape)}")
