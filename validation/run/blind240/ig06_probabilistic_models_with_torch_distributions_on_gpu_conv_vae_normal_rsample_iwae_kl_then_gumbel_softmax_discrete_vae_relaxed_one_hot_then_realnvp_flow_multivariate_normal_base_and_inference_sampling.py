"""Three probabilistic models written with `torch.distributions` reparameterised sampling on the GPU.
Argument validation is switched off (`Distribution.set_default_validate_args(False)`), as training
code does for speed.

1. A convolutional VAE on 64 x 64 RGB images (encoder 3->32->64->128->256 stride-2 convs, latent 128,
   transposed-conv decoder), posterior `Normal(mu, softplus(s))` with K=4 importance samples per image
   (`rsample((4,))`, IWAE bound by logsumexp), prior `Normal(0, 1)`, `kl_divergence` for logging,
   Bernoulli-logits likelihood by BCE; Adam with OneCycleLR and `zero_grad(set_to_none=False)`, batch
   128, 4 steps, fp32.
2. A discrete VAE: 32 categorical latents of 64 classes from an MLP encoder over flattened 32 x 32
   images; `RelaxedOneHotCategorical(temperature, logits).rsample()` (Gumbel-softmax) and
   `OneHotCategoricalStraightThrough(logits).rsample()` for the straight-through variant; KL to a uniform
   `OneHotCategorical`; batch 1,024, AdamW, 3 steps.
3. A RealNVP flow on 64-D data: 6 affine coupling layers (MLP 32 -> 512 -> 512 -> 64, tanh-bounded
   log-scales, alternating masks by flipping), base `MultivariateNormal(0, scale_tril=L)` with L a
   learned lower-triangular matrix (exp on its diagonal), `log_prob` of the data, batch 16,384, Adam,
   4 steps.
4. inference_mode sampling: 65,536 flow samples (base `rsample` then the inverse couplings), 1,024
   VAE decodes of prior samples, and 4,096 discrete-VAE prior samples decoded.
Phases: model, conv VAE, discrete VAE, RealNVP, sampling. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import (
    Distribution,
    MultivariateNormal,
    Normal,
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
    RelaxedOneHotCategorical,
    kl_divergence,
)

torch.manual_seed(2406)
device = "cuda"
Distribution.set_default_validate_args(False)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class ConvVAE(nn.Module):
    def __init__(self, z=128):
        super().__init__()
        chans = [3, 32, 64, 128, 256]
        self.enc = nn.Sequential(*[m for i in range(4) for m in (nn.Conv2d(chans[i], chans[i + 1], 4, 2, 1), nn.SiLU())],
                                 nn.Flatten())
        self.to_stats = nn.Linear(256 * 4 * 4, 2 * z)
        self.from_z = nn.Linear(z, 256 * 4 * 4)
        self.dec = nn.Sequential(*[m for i in range(4, 1, -1) for m in (nn.ConvTranspose2d(chans[i], chans[i - 1], 4, 2, 1), nn.SiLU())],
                                 nn.ConvTranspose2d(32, 3, 4, 2, 1))
        self.z = z

    def decode(self, z):
        return self.dec(self.from_z(z).view(-1, 256, 4, 4))

    def forward(self, x, k=4):
        mu, s = self.to_stats(self.enc(x)).chunk(2, dim=-1)
        q = Normal(mu, F.softplus(s) + 1e-4)
        p = Normal(torch.zeros_like(mu), torch.ones_like(mu))
        z = q.rsample((k,))  # (k, B, z)
        logits = self.decode(z.flatten(0, 1)).view(k, *x.shape)
        rec = -F.binary_cross_entropy_with_logits(logits, x.expand(k, *x.shape), reduction="none").flatten(2).sum(-1)
        log_w = rec + p.log_prob(z).sum(-1) - q.log_prob(z).sum(-1)
        iwae = torch.logsumexp(log_w, dim=0) - torch.log(torch.tensor(float(k), device=x.device))
        return -iwae.mean(), kl_divergence(q, p).sum(-1).mean()


class DiscreteVAE(nn.Module):
    def __init__(self, n=32, k=64):
        super().__init__()
        self.n, self.k = n, k
        self.enc = nn.Sequential(nn.Linear(3 * 32 * 32, 1024), nn.ReLU(), nn.Linear(1024, n * k))
        self.dec = nn.Sequential(nn.Linear(n * k, 1024), nn.ReLU(), nn.Linear(1024, 3 * 32 * 32))

    def forward(self, x, temperature, straight_through=False):
        logits = self.enc(x.flatten(1)).view(-1, self.n, self.k)
        if straight_through:
            z = OneHotCategoricalStraightThrough(logits=logits).rsample()
        else:
            z = RelaxedOneHotCategorical(temperature, logits=logits).rsample()
        rec = F.binary_cross_entropy_with_logits(self.dec(z.flatten(1)), x.flatten(1), reduction="sum") / x.shape[0]
        prior = OneHotCategorical(logits=torch.zeros_like(logits))
        kl = kl_divergence(OneHotCategorical(logits=logits), prior).sum(-1).mean()
        return rec + kl


class Coupling(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d // 2, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, d))

    def forward(self, x):  # data -> latent, with log|det|
        a, b = x.chunk(2, dim=-1)
        log_s, t = self.net(a).chunk(2, dim=-1)
        log_s = torch.tanh(log_s)
        return torch.cat([a, (b - t) * torch.exp(-log_s)], dim=-1).flip(-1), -log_s.sum(-1)

    def inverse(self, z):
        a, b = z.flip(-1).chunk(2, dim=-1)
        log_s, t = self.net(a).chunk(2, dim=-1)
        return torch.cat([a, b * torch.exp(torch.tanh(log_s)) + t], dim=-1)


class RealNVP(nn.Module):
    def __init__(self, d=64, layers=6):
        super().__init__()
        self.layers = nn.ModuleList([Coupling(d) for _ in range(layers)])
        self.raw_tril = nn.Parameter(torch.zeros(d, d))

    def base(self):
        L = torch.tril(self.raw_tril, -1) + torch.diag(torch.exp(self.raw_tril.diagonal()))
        return MultivariateNormal(torch.zeros(L.shape[0], device=L.device), scale_tril=L)

    def log_prob(self, x):
        logdet = 0.0
        for layer in self.layers:
            x, ld = layer(x)
            logdet = logdet + ld
        return self.base().log_prob(x) + logdet

    def sample(self, n):
        z = self.base().rsample((n,))
        for layer in reversed(self.layers):
            z = layer.inverse(z)
        return z


with torch.device(device):  # built on the GPU, not on the host first
    vae, dvae, flow = ConvVAE(), DiscreteVAE(), RealNVP()
print("parameters", sum(p.numel() for m in (vae, dvae, flow) for p in m.parameters()))
report("model")

opt = torch.optim.Adam(vae.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=4)
for step in range(4):
    x = torch.rand(128, 3, 64, 64, device=device)
    loss, kl = vae(x)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
    sched.step()
    print(f"vae step {step} loss {loss.item():.2f} kl {kl.item():.2f}")
del x, loss, kl, opt, sched
report("conv vae iwae rsample")

opt = torch.optim.AdamW(dvae.parameters(), lr=1e-3)
temperature = torch.tensor(0.67, device=device)
for step in range(3):
    x = torch.rand(1024, 3, 32, 32, device=device)
    loss = dvae(x, temperature) + dvae(x, temperature, straight_through=True)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"dvae step {step} loss {loss.item():.2f}")
del x, loss, opt
report("discrete vae gumbel softmax")

opt = torch.optim.Adam(flow.parameters(), lr=1e-4)
for step in range(4):
    x = torch.randn(16384, 64, device=device) * 0.5 + torch.linspace(-1, 1, 64, device=device)
    nll = -flow.log_prob(x).mean()
    opt.zero_grad(set_to_none=True)
    nll.backward()
    opt.step()
    print(f"flow step {step} nll {nll.item():.3f}")
del x, nll, opt
report("realnvp multivariate normal base")

with torch.inference_mode():
    samples = flow.sample(65536)
    print("flow samples", tuple(samples.shape), samples.mean().item())
    imgs = torch.sigmoid(vae.decode(Normal(0.0, 1.0).sample((1024, vae.z)).to(device)))
    codes = OneHotCategorical(logits=torch.zeros(4096, 32, 64, device=device)).sample()
    dimgs = torch.sigmoid(dvae.dec(codes.flatten(1)))
    print("decoded", tuple(imgs.shape), tuple(dimgs.shape))
report("sampling")
