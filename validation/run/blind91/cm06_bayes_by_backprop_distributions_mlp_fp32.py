"""Bayes by backprop with torch.distributions: a 3-layer Bayesian MLP (784-1,200-1,200-10 fully
factorised Gaussian posteriors, softplus scales) whose weights are rsample()d per forward from
Normal posteriors, an ELBO of Categorical log-likelihood minus kl_divergence(posterior, Normal
prior) summed over layers, 3 Monte Carlo samples per step, Adam, batch 1,024, 4 steps; then a
50-sample predictive mean under torch.inference_mode; fp32; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, Normal, kl_divergence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9106)
IN, HID, C, B, MC, PRED = (16, 32, 10, 8, 2, 3) if SMALL else (784, 1200, 10, 1024, 3, 50)
device = "cuda" if torch.cuda.is_available() else "cpu"


class BayesLinear(nn.Module):
    def __init__(self, fan_in, fan_out):
        super().__init__()
        self.w_mu = nn.Parameter(torch.randn(fan_out, fan_in) * 0.05)
        self.w_rho = nn.Parameter(torch.full((fan_out, fan_in), -5.0))
        self.b_mu = nn.Parameter(torch.zeros(fan_out))
        self.b_rho = nn.Parameter(torch.full((fan_out,), -5.0))

    def posteriors(self):
        return Normal(self.w_mu, F.softplus(self.w_rho)), Normal(self.b_mu, F.softplus(self.b_rho))

    def forward(self, x):
        qw, qb = self.posteriors()
        return F.linear(x, qw.rsample(), qb.rsample())

    def kl(self):
        prior = Normal(torch.zeros((), device=self.w_mu.device), torch.ones((), device=self.w_mu.device))
        return sum(kl_divergence(q, prior).sum() for q in self.posteriors())


layers = nn.ModuleList([BayesLinear(IN, HID), BayesLinear(HID, HID), BayesLinear(HID, C)]).to(device)


def forward(x):
    for i, layer in enumerate(layers):
        x = layer(x)
        if i < len(layers) - 1:
            x = F.relu(x)
    return x


optimizer = torch.optim.Adam(layers.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
N_DATA = 60000
for step in range(4):
    x = torch.rand(B, IN, device=device)
    y = torch.randint(0, C, (B,), device=device)
    nll = sum(-Categorical(logits=forward(x)).log_prob(y).mean() for _ in range(MC)) / MC
    kl = sum(layer.kl() for layer in layers)
    loss = nll + kl / N_DATA
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} nll {nll.item():.3f} kl {kl.item():.1f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, nll, kl, loss
with torch.inference_mode():
    x = torch.rand(4 * B, IN, device=device)
    probs = torch.stack([forward(x).softmax(-1) for _ in range(PRED)]).mean(0)
    entropy = Categorical(probs=probs).entropy().mean()
del x, probs
if device == "cuda":
    print(
        f"predictive entropy {entropy.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
