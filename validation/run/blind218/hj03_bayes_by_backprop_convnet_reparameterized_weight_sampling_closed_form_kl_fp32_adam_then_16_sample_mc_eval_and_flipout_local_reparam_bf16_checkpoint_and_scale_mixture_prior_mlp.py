"""Bayes by Backprop (Blundell et al. 2015) by hand: a Bayesian conv net with a factorised Gaussian posterior.

Every weight and bias has a mean and a rho (sigma = softplus(rho)); each forward samples fresh weights
w = mu + sigma * eps (the reparameterisation trick), and the loss is the negative ELBO: the data NLL plus the
closed-form KL to a N(0, 0.1^2) prior, divided by the dataset size. The net is 5 Bayesian 3x3 convs (64 ->
512 channels, max pooling) and a Bayesian linear head on 64 x 64 images, 100 classes.

Phases: 3 steps of Adam in fp32 at batch 192 with two weight samples per step (two forwards, the two ELBOs
averaged into one backward); MC predictive evaluation under no_grad with 16 weight samples at batch 512
(predictive entropy and expected calibration error from 15 confidence bins); Flipout (Wen et al. 2018) for
the convs and the local reparameterisation trick (Kingma et al. 2015) for the head, each block under
non-reentrant checkpointing, bf16 autocast and foreach AdamW at batch 256; then empty_cache() and a Bayesian
MLP 3072 -> 2 x 4096 -> 10 with Blundell's scale-mixture prior, its KL estimated by Monte Carlo
(log q(w) - log p(w) at the sampled weights, the mixture by logsumexp), SGD momentum at batch 1024. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2183)
device = "cuda" if torch.cuda.is_available() else "cpu"
CLASSES, IMG, N_DATA = 100, (16 if SMALL else 64), 50000
B_TRAIN, B_EVAL, B_FLIP, B_MLP = (4, 8, 4, 8) if SMALL else (192, 512, 256, 1024)
S_EVAL = 3 if SMALL else 16
MLP_H = 128 if SMALL else 4096
PRIOR_SIGMA = 0.1


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class BayesParam(nn.Module):
    def __init__(self, *shape, fan_in):
        super().__init__()
        self.mu = nn.Parameter(torch.randn(*shape) * math.sqrt(2.0 / fan_in))
        self.rho = nn.Parameter(torch.full(shape, -5.0))

    def sigma(self):
        return F.softplus(self.rho)

    def sample(self):
        return self.mu + self.sigma() * torch.randn_like(self.mu)

    def kl(self):
        s = self.sigma()
        return (math.log(PRIOR_SIGMA) - s.log() + (s.square() + self.mu.square()) / (2 * PRIOR_SIGMA**2) - 0.5).sum()


class BayesConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.w = BayesParam(cout, cin, 3, 3, fan_in=cin * 9)
        self.b = BayesParam(cout, fan_in=cin * 9)

    def forward(self, x, flipout=False):
        if not flipout:
            return F.conv2d(x, self.w.sample(), self.b.sample(), padding=1)
        # Flipout: shared perturbation decorrelated per example by random sign flips
        sign_in = torch.empty_like(x[:, :, :1, :1]).bernoulli_(0.5).mul_(2).sub_(1)
        mean = F.conv2d(x, self.w.mu, self.b.mu, padding=1)
        delta_w = self.w.sigma() * torch.randn_like(self.w.mu)
        pert = F.conv2d(x * sign_in, delta_w, padding=1)
        sign_out = torch.empty_like(mean[:, :, :1, :1]).bernoulli_(0.5).mul_(2).sub_(1)
        return mean + pert * sign_out

    def kl(self):
        return self.w.kl() + self.b.kl()


class BayesLinear(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.w = BayesParam(cout, cin, fan_in=cin)
        self.b = BayesParam(cout, fan_in=cin)

    def forward(self, x, local_reparam=False):
        if not local_reparam:
            return F.linear(x, self.w.sample(), self.b.sample())
        mean = F.linear(x, self.w.mu, self.b.mu)
        var = F.linear(x.square(), self.w.sigma().square(), self.b.sigma().square())
        return mean + var.clamp_min(1e-16).sqrt() * torch.randn_like(mean)

    def kl(self):
        return self.w.kl() + self.b.kl()


class BayesCNN(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [3, 64, 128, 256, 512, 512]
        self.convs = nn.ModuleList(BayesConv(a, b) for a, b in zip(chans[:-1], chans[1:]))
        self.head = BayesLinear(512, CLASSES)

    def block(self, i, x, flipout):
        x = F.relu(self.convs[i](x, flipout))
        return F.max_pool2d(x, 2) if i > 0 else x

    def forward(self, x, flipout=False, ckpt=False):
        for i in range(len(self.convs)):
            if ckpt:
                x = checkpoint(self.block, i, x, flipout, use_reentrant=False)
            else:
                x = self.block(i, x, flipout)
        return self.head(x.mean((2, 3)), local_reparam=flipout)

    def kl(self):
        return sum(m.kl() for m in [*self.convs, self.head])


net = BayesCNN().to(device)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(B_TRAIN, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B_TRAIN,), device=device)
    elbo = 0
    for s in range(2):
        elbo = elbo + F.cross_entropy(net(x), y) + net.kl() / N_DATA
    loss = elbo / 2
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"bbb loss {loss.item():.4f}")
report("bayes by backprop fp32 adam two samples")

with torch.no_grad():
    x = torch.randn(B_EVAL, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B_EVAL,), device=device)
    probs = torch.zeros(B_EVAL, CLASSES, device=device)
    for s in range(S_EVAL):
        probs += net(x).softmax(-1)
    probs /= S_EVAL
    ent = -(probs * probs.clamp_min(1e-12).log()).sum(-1)
    conf, pred = probs.max(-1)
    correct = pred.eq(y).float()
    edges = torch.linspace(0, 1, 16, device=device)
    bins = torch.bucketize(conf, edges[1:-1])
    count = torch.zeros(15, device=device).index_add_(0, bins, torch.ones_like(conf))
    conf_sum = torch.zeros(15, device=device).index_add_(0, bins, conf)
    acc_sum = torch.zeros(15, device=device).index_add_(0, bins, correct)
    ece = (conf_sum - acc_sum).abs().sum() / B_EVAL
    print(f"mc entropy {ent.mean().item():.4f} ece {ece.item():.4f} bins {int((count > 0).sum().item())}")
    del probs
report("mc predictive eval 16 samples no_grad")

del opt
opt = torch.optim.AdamW(net.parameters(), lr=5e-4, weight_decay=0.0, foreach=True)
for step in range(3):
    x = torch.randn(B_FLIP, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B_FLIP,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = net(x, flipout=True, ckpt=True)
    loss = F.cross_entropy(logits.float(), y) + net.kl() / N_DATA
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"flipout loss {loss.item():.4f}")
report("flipout local reparam bf16 checkpoint foreach adamw")

# Bayesian MLP with a scale-mixture prior, KL by Monte Carlo at the sampled weights
del opt, net, logits, loss
if device == "cuda":
    torch.cuda.empty_cache()
PI, S1, S2 = 0.5, math.exp(-0), math.exp(-6)
LOG_2PI = math.log(2 * math.pi)


def log_gauss(w, mu, sigma):
    return -0.5 * LOG_2PI - torch.log(sigma) - (w - mu).square() / (2 * sigma.square())


def log_mixture_prior(w):
    a = math.log(PI) - 0.5 * LOG_2PI - math.log(S1) - w.square() / (2 * S1**2)
    b = math.log(1 - PI) - 0.5 * LOG_2PI - math.log(S2) - w.square() / (2 * S2**2)
    return torch.logsumexp(torch.stack([a, b]), 0)


dims = [3072, MLP_H, MLP_H, 10]
layers = nn.ModuleList(BayesLinear(a, b) for a, b in zip(dims[:-1], dims[1:])).to(device)
opt = torch.optim.SGD(layers.parameters(), lr=1e-3, momentum=0.9)
for step in range(3):
    x = torch.randn(B_MLP, 3072, device=device)
    y = torch.randint(0, 10, (B_MLP,), device=device)
    h, kl = x, 0
    for i, layer in enumerate(layers):
        w_sigma, b_sigma = layer.w.sigma(), layer.b.sigma()
        w = layer.w.mu + w_sigma * torch.randn_like(w_sigma)
        b = layer.b.mu + b_sigma * torch.randn_like(b_sigma)
        kl = kl + (log_gauss(w, layer.w.mu, w_sigma).sum() - log_mixture_prior(w).sum())
        kl = kl + (log_gauss(b, layer.b.mu, b_sigma).sum() - log_mixture_prior(b).sum())
        h = F.linear(h, w, b)
        if i < len(layers) - 1:
            h = F.relu(h)
    loss = F.cross_entropy(h, y) + kl / N_DATA
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"scale mixture loss {loss.item():.4f}")
report("scale mixture prior mc kl mlp sgd")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
