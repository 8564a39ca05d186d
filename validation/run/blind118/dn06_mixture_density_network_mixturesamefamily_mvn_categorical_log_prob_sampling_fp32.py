"""A mixture density network for multimodal trajectory endpoints (as in motion forecasting), with
torch.distributions: an MLP encoder over 64 past positions of 2-D agents predicts, per agent, 16
mixture components of full-covariance 8-dimensional Gaussians (MultivariateNormal with a
scale_tril from a softplus diagonal and a strictly lower part) mixed by a Categorical of logits,
combined with MixtureSameFamily; negative log_prob with backward through the Cholesky-based
densities, batch 32,768 agents, fp32, Adam with gradient clipping, 4 steps; then sampling 64
futures per agent under no_grad (MixtureSameFamily.sample: Categorical.sample and gathered
MultivariateNormal rsamples), a minADE over them with topk of the negative errors, and the
Categorical's entropy; the samples' log_prob under the mixture; 7 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical, MixtureSameFamily, MultivariateNormal

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11807)
B, T, K, DO, H, STEPS, NS = (64, 8, 3, 4, 32, 2, 4) if SMALL else (32768, 64, 16, 8, 1024, 4, 64)
device = "cuda" if torch.cuda.is_available() else "cpu"
NTRIL = DO * (DO - 1) // 2


class MDN(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Linear(2 * T, H), nn.SiLU(), nn.Linear(H, H), nn.SiLU(), nn.Linear(H, H), nn.SiLU()
        )
        self.logits = nn.Linear(H, K)
        self.mu = nn.Linear(H, K * DO)
        self.diag = nn.Linear(H, K * DO)
        self.off = nn.Linear(H, K * NTRIL)
        self.register_buffer("tril_idx", torch.tril_indices(DO, DO, -1))

    def forward(self, past):
        h = self.enc(past.flatten(1))
        n = past.size(0)
        lower = torch.zeros(n, K, DO, DO, device=past.device)
        lower[:, :, self.tril_idx[0], self.tril_idx[1]] = self.off(h).view(n, K, NTRIL)
        scale_tril = lower + torch.diag_embed(F.softplus(self.diag(h).view(n, K, DO)) + 1e-3)
        comp = MultivariateNormal(self.mu(h).view(n, K, DO), scale_tril=scale_tril)
        return MixtureSameFamily(Categorical(logits=self.logits(h)), comp)


def data(n):
    vel = torch.randn(n, 1, 2, device=device)
    past = (vel * torch.arange(T, device=device).view(1, T, 1)).cumsum(1) * 0.1 + 0.05 * torch.randn(
        n, T, 2, device=device
    )
    turn = torch.randint(0, 3, (n, 1), device=device).float() - 1
    fut = past[:, -1:].expand(n, DO // 2, 2) + vel * torch.arange(1, DO // 2 + 1, device=device).view(
        1, -1, 1
    )
    fut = fut + turn.unsqueeze(-1) * torch.randn(n, DO // 2, 2, device=device).abs()
    return past, fut.flatten(1)


model = MDN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    past, fut = data(B)
    mix = model(past)
    nll = -mix.log_prob(fut).mean()
    opt.zero_grad(set_to_none=True)
    nll.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} nll {nll.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del past, fut, mix, nll

with torch.no_grad():
    past, fut = data(B)
    mix = model(past)
    samples = mix.sample((NS,))
    err = (samples - fut).view(NS, B, DO // 2, 2).norm(dim=-1).mean(-1)
    best = (-err).topk(min(6, NS), dim=0).values.neg()
    ent = mix.mixture_distribution.entropy()
if device == "cuda":
    print(
        f"sample minADE6 {best[0].mean().item():.3f} entropy {ent.mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    lp = mix.log_prob(samples[:8])
if device == "cuda":
    print(
        f"rescore {lp.mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
