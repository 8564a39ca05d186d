"""A convolutional VAE on 64 x 64 RGB images with a discretized mixture-of-logistics likelihood
(PixelCNN++'s, written out: 10 components, per-channel means with linear channel dependence, the
log of sigmoid differences with the edge cases of 0 and 255 and the log-pdf fallback, log_softmax
mixture weights, logsumexp): an encoder of strided 4x4 convolutions (64 to 512 channels, BatchNorm,
LeakyReLU) to a 128-dimensional diagonal Gaussian posterior drawn by
torch.distributions.Normal.rsample with an analytic kl_divergence to the standard normal prior,
a ConvTranspose2d decoder to 100 channels of mixture parameters; batch 64 under fp16 autocast with
GradScaler, Adam, 3 steps with KL warm-up; then an importance-weighted bound with 16 samples per
image over 64 images under no_grad, one image chunk of 8 at a time, and 32 images sampled from
the mixture by Gumbel-max; 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11308)
B, RES, STEPS, NEVAL, KIW, NSAMP = (4, 16, 2, 4, 2, 2) if SMALL else (64, 64, 3, 64, 16, 32)
Z, NMIX = 128, 10
device = "cuda" if torch.cuda.is_available() else "cpu"


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layers, cin = [], 3
        for cout in (64, 128, 256, 512):
            layers += [nn.Conv2d(cin, cout, 4, 2, 1), nn.BatchNorm2d(cout), nn.LeakyReLU(0.2)]
            cin = cout
        self.conv = nn.Sequential(*layers)
        self.fc = nn.Linear(512 * (RES // 16) ** 2, 2 * Z)

    def forward(self, x):
        mu, log_var = self.fc(self.conv(x).flatten(1)).chunk(2, -1)
        return Normal(mu, (0.5 * log_var).exp())


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(Z, 512 * (RES // 16) ** 2)
        layers, cin = [], 512
        for cout in (256, 128, 64):
            layers += [nn.ConvTranspose2d(cin, cout, 4, 2, 1), nn.BatchNorm2d(cout), nn.ReLU()]
            cin = cout
        layers.append(nn.ConvTranspose2d(cin, NMIX * 10, 4, 2, 1))
        self.deconv = nn.Sequential(*layers)

    def forward(self, z):
        return self.deconv(self.fc(z).view(-1, 512, RES // 16, RES // 16))


def split_params(p):
    b, _, h, w = p.shape
    p = p.float().permute(0, 2, 3, 1)
    logit_probs = p[..., :NMIX]
    rest = p[..., NMIX:].reshape(b, h, w, 3, 3 * NMIX)
    means, log_scales, coeffs = rest.split(NMIX, -1)
    return logit_probs, means, log_scales.clamp(min=-7.0), torch.tanh(coeffs)


def discretized_mix_logistic_log_prob(x, p):
    """x in [-1, 1], (B, 3, H, W); p the decoder's (B, 100, H, W); per-image log-likelihood."""
    logit_probs, means, log_scales, coeffs = split_params(p)
    x = x.permute(0, 2, 3, 1).unsqueeze(-1)
    m0 = means[..., 0, :]
    m1 = means[..., 1, :] + coeffs[..., 0, :] * x[..., 0, :]
    m2 = means[..., 2, :] + coeffs[..., 1, :] * x[..., 0, :] + coeffs[..., 2, :] * x[..., 1, :]
    means = torch.stack([m0, m1, m2], -2)
    centered = x - means
    inv_s = torch.exp(-log_scales)
    cdf_plus = torch.sigmoid(inv_s * (centered + 1.0 / 255.0))
    cdf_min = torch.sigmoid(inv_s * (centered - 1.0 / 255.0))
    log_cdf_plus = (inv_s * (centered + 1.0 / 255.0)) - F.softplus(inv_s * (centered + 1.0 / 255.0))
    log_one_minus_cdf_min = -F.softplus(inv_s * (centered - 1.0 / 255.0))
    cdf_delta = cdf_plus - cdf_min
    mid_in = inv_s * centered
    log_pdf_mid = mid_in - log_scales - 2.0 * F.softplus(mid_in)
    inner = torch.where(cdf_delta > 1e-5, cdf_delta.clamp(min=1e-12).log(), log_pdf_mid - math.log(127.5))
    log_probs = torch.where(x < -0.999, log_cdf_plus, torch.where(x > 0.999, log_one_minus_cdf_min, inner))
    log_probs = log_probs.sum(-2) + F.log_softmax(logit_probs, -1)
    return torch.logsumexp(log_probs, -1).flatten(1).sum(-1)


def sample_mixture(p):
    logit_probs, means, log_scales, coeffs = split_params(p)
    gumbel = -torch.log(-torch.log(torch.rand_like(logit_probs).clamp(1e-5, 1 - 1e-5)))
    sel = F.one_hot((logit_probs + gumbel).argmax(-1), NMIX).float().unsqueeze(-2)
    means, log_scales, coeffs = ((t * sel).sum(-1) for t in (means, log_scales, coeffs))
    u = torch.rand_like(means).clamp(1e-5, 1 - 1e-5)
    x = means + log_scales.exp() * (u.log() - (1 - u).log())
    x0 = x[..., 0].clamp(-1, 1)
    x1 = (x[..., 1] + coeffs[..., 0] * x0).clamp(-1, 1)
    x2 = (x[..., 2] + coeffs[..., 1] * x0 + coeffs[..., 2] * x1).clamp(-1, 1)
    return torch.stack([x0, x1, x2], 1)


enc, dec = Encoder().to(device), Decoder().to(device)
opt = torch.optim.Adam(list(enc.parameters()) + list(dec.parameters()), lr=2e-4)
scaler = torch.amp.GradScaler(device)
prior = Normal(torch.zeros(Z, device=device), torch.ones(Z, device=device))


def images(n):
    return (torch.randint(0, 256, (n, 3, RES, RES), device=device).float() / 127.5 - 1).clamp(-1, 1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    x = images(B)
    with torch.autocast(device, dtype=torch.float16):
        q = enc(x)
        z = q.rsample()
        logp = discretized_mix_logistic_log_prob(x, dec(z))
        kl = kl_divergence(q, prior).sum(-1)
        loss = (-logp + min(1.0, (step + 1) / 3) * kl).mean() / (3 * RES * RES)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} bpd {loss.item() / math.log(2):.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, q, z, logp, kl, loss
enc.eval()
dec.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    x = images(NEVAL)
    bounds = []
    for part in x.split(8):
        q = enc(part)
        z = q.rsample((KIW,))
        logw = (
            discretized_mix_logistic_log_prob(part.repeat(KIW, 1, 1, 1), dec(z.flatten(0, 1))).view(KIW, -1)
            + prior.log_prob(z).sum(-1)
            - q.log_prob(z).sum(-1)
        )
        bounds.append(torch.logsumexp(logw, 0) - math.log(KIW))
    iwae = torch.cat(bounds).mean()
if device == "cuda":
    print(
        f"iwae {iwae.item():.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    samples = sample_mixture(dec(torch.randn(NSAMP, Z, device=device)))
if device == "cuda":
    print(
        f"sample {tuple(samples.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
