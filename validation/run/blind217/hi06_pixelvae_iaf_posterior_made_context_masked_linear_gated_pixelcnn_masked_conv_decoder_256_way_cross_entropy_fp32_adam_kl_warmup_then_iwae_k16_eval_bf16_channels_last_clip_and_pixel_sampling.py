"""A PixelVAE with an inverse autoregressive flow posterior (Kingma et al. 2016; Gulrajani et al. 2017) on random
32 x 32 RGB images with 8-bit pixels.

Encoder: two stride-2 convolutions and a residual block to 128 x 8 x 8, flattened to the posterior's mean,
log-scale and a 512-dimensional context h. Posterior: z0 = mu + sigma eps, then 4 IAF steps, each a MADE
of masked Linear layers (F.linear(x, weight * mask)) whose first hidden layer adds a projection of h,
emitting (m, s), z <- sigmoid(s) z + (1 - sigmoid(s)) m, log q -= sum log sigmoid(s), the order reversed
between steps. Decoder: z (256) -> Linear -> 64 x 8 x 8 -> two ConvTranspose2d to a 64 x 32 x 32 conditioning
map; a PixelCNN of a 7x7 mask-A convolution and 6 gated residual layers of 3x3 mask-B convolutions (a
Conv2d subclass multiplying its weight by a mask buffer every forward) with the conditioning added through
1x1 convolutions, tanh * sigmoid gates, and 3 x 256 logits scored by 256-way cross_entropy. The loss is
the negative ELBO in bits per dimension with a linear KL warm-up.

Phases: 3 steps at batch 128 in fp32 with Adam; the importance-weighted bound (k = 16 samples per image,
logsumexp) at batch 32 under no_grad; 3 steps under bf16 autocast with the model and the inputs in
channels_last, AdamW and gradient clipping; then autoregressive sampling under inference_mode of the first
4 rows (128 pixel positions, a full PixelCNN pass each, Gumbel-max over the 256 logits) for 16 images from
the prior. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2176)
device = "cuda" if torch.cuda.is_available() else "cpu"
SIZE, ZDIM, CTX, HID, PIX = (16, 32, 64, 128, 32) if SMALL else (32, 256, 512, 1024, 128)
BATCH, IWAE_BATCH, K_IW, SAMPLES, ROWS = (4, 2, 4, 2, 1) if SMALL else (128, 32, 16, 16, 4)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class MaskedLinear(nn.Linear):
    def __init__(self, din, dout, mask):
        super().__init__(din, dout)
        self.register_buffer("mask", mask)

    def forward(self, x):
        return F.linear(x, self.weight * self.mask, self.bias)


class IAFStep(nn.Module):
    def __init__(self):
        super().__init__()
        deg_in = torch.arange(1, ZDIM + 1)
        deg_h = torch.arange(HID) % (ZDIM - 1) + 1
        self.l1 = MaskedLinear(ZDIM, HID, (deg_h[:, None] >= deg_in[None, :]).float())
        self.ctx = nn.Linear(CTX, HID)
        self.l2 = MaskedLinear(HID, HID, (deg_h[:, None] >= deg_h[None, :]).float())
        out_mask = (deg_in[:, None] > deg_h[None, :]).float()
        self.m = MaskedLinear(HID, ZDIM, out_mask)
        self.s = MaskedLinear(HID, ZDIM, out_mask)

    def forward(self, z, h):
        a = F.elu(self.l1(z) + self.ctx(h))
        a = F.elu(self.l2(a))
        gate = torch.sigmoid(self.s(a) + 1.5)
        z = gate * z + (1 - gate) * self.m(a)
        return z.flip(1), torch.log(gate).sum(1)


class MaskedConv2d(nn.Conv2d):
    def __init__(self, mask_type, cin, cout, k):
        super().__init__(cin, cout, k, padding=k // 2)
        mask = torch.ones_like(self.weight)
        mask[:, :, k // 2, k // 2 + (mask_type == "B") :] = 0
        mask[:, :, k // 2 + 1 :] = 0
        self.register_buffer("mask", mask)

    def forward(self, x):
        return self._conv_forward(x, self.weight * self.mask, self.bias)


class GatedLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = MaskedConv2d("B", PIX, 2 * PIX, 3)
        self.cond = nn.Conv2d(64, 2 * PIX, 1)
        self.out = nn.Conv2d(PIX, PIX, 1)

    def forward(self, x, c):
        a, b = (self.conv(x) + self.cond(c)).chunk(2, 1)
        return x + self.out(torch.tanh(a) * torch.sigmoid(b))


class PixelVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(3, 64, 4, 2, 1), nn.ELU(), nn.Conv2d(64, 128, 4, 2, 1), nn.ELU(),
            nn.Conv2d(128, 128, 3, padding=1), nn.ELU(), nn.Conv2d(128, 128, 3, padding=1),
        )
        flat = 128 * (SIZE // 4) ** 2
        self.enc_out = nn.Linear(flat, 2 * ZDIM + CTX)
        self.iaf = nn.ModuleList(IAFStep() for _ in range(4))
        self.dec_in = nn.Linear(ZDIM, 64 * (SIZE // 4) ** 2)
        self.up = nn.Sequential(
            nn.ConvTranspose2d(64, 64, 4, 2, 1), nn.ELU(), nn.ConvTranspose2d(64, 64, 4, 2, 1), nn.ELU()
        )
        self.inp = MaskedConv2d("A", 3, PIX, 7)
        self.layers = nn.ModuleList(GatedLayer() for _ in range(6))
        self.head = nn.Sequential(nn.ELU(), nn.Conv2d(PIX, PIX, 1), nn.ELU(), nn.Conv2d(PIX, 3 * 256, 1))

    def posterior(self, x):
        e = self.enc(x)
        mu, logsig, h = self.enc_out(F.elu(e.flatten(1))).split([ZDIM, ZDIM, CTX], 1)
        eps = torch.randn_like(mu)
        z = mu + torch.exp(logsig) * eps
        logq = (-0.5 * (eps.float() ** 2 + math.log(2 * math.pi)) - logsig.float()).sum(1)
        for step in self.iaf:
            z, logdet = step(z, h)
            logq = logq - logdet.float()
        return z, logq

    def conditioning(self, z):
        s = SIZE // 4
        c = self.dec_in(z).view(-1, 64, s, s)
        return self.up(c)

    def logits(self, x, c):
        h = self.inp(x)
        for layer in self.layers:
            h = layer(h, c)
        return self.head(h).view(x.shape[0], 256, 3, SIZE, SIZE)


def log_normal(z):
    return (-0.5 * (z.float() ** 2 + math.log(2 * math.pi))).sum(1)


def log_weights(model, x_int):
    x = x_int.float() / 127.5 - 1
    z, logq = model.posterior(x)
    c = model.conditioning(z)
    recon = F.cross_entropy(model.logits(x, c).float(), x_int, reduction="none").flatten(1).sum(1)
    return recon, logq - log_normal(z)


def images(n):
    return torch.randint(0, 256, (n, 3, SIZE, SIZE), device=device)


DIMS = 3 * SIZE * SIZE
model = PixelVAE().to(device)
opt = torch.optim.Adam(model.parameters(), lr=2e-4)
for it in range(3):
    beta = min(1.0, (it + 1) / 10)
    recon, kl = log_weights(model, images(BATCH))
    loss = (recon + beta * kl).mean() / (DIMS * math.log(2))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"fp32 elbo bpd {loss.item():.4f}")
report("pixelvae iaf fp32 adam")

model.eval()
with torch.no_grad():
    x = images(IWAE_BATCH)
    xk = x.unsqueeze(1).expand(-1, K_IW, -1, -1, -1).reshape(-1, 3, SIZE, SIZE)
    recon, kl = log_weights(model, xk)
    log_w = -(recon + kl).view(IWAE_BATCH, K_IW)
    iwae = -(torch.logsumexp(log_w, 1) - math.log(K_IW)).mean() / (DIMS * math.log(2))
print(f"iwae k={K_IW} bpd {iwae.item():.4f}")
del x, xk, recon, kl, log_w
report("iwae k16 no_grad")

model.train()
model.to(memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=1e-4)
for it in range(3):
    x = images(BATCH).contiguous(memory_format=torch.channels_last)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        recon, kl = log_weights(model, x)
        loss = (recon + kl).mean() / (DIMS * math.log(2))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
print(f"bf16 channels_last elbo bpd {loss.item():.4f}")
report("bf16 autocast channels_last adamw")

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    c = model.conditioning(torch.randn(SAMPLES, ZDIM, device=device))
    x = torch.zeros(SAMPLES, 3, SIZE, SIZE, device=device)
    for i in range(ROWS):
        for j in range(SIZE):
            logits = model.logits(x, c)[:, :, :, i, j].float()
            gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-10)))
            x[:, :, i, j] = (logits + gumbel).argmax(1).float() / 127.5 - 1
print(f"sampled rows mean {x[:, :, :ROWS].mean().item():.4f}")
report("autoregressive pixel sampling inference_mode")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
