"""A variational autoencoder with a normalizing-flow posterior on flattened 64x64 "images": the encoder
outputs a torch.distributions.LowRankMultivariateNormal (loc, rank-8 cov_factor, cov_diag), samples go
through rsample into eight planar flows (log|det J| accumulated by hand), and the ELBO uses the
LowRank posterior's log_prob, the flow log-dets and a MultivariateNormal prior (scale_tril); the
analytic kl_divergence(LowRank || MVN) is logged alongside. The decoder runs under non-reentrant
torch.utils.checkpoint with a selective activation-checkpoint policy
(create_selective_checkpoint_contexts: save matmuls, recompute the rest). NAdam with decoupled weight
decay under CyclicLR (cycle_momentum=False); an AveragedModel built with
get_swa_multi_avg_fn (foreach averaging) from the second half. Finally a 32-sample importance-weighted
bound (rsample with sample_shape, logsumexp) from the averaged model.

Phases: 0 data and model; 1 VAE training with selective checkpointing and SWA; 2 analytic KL and
reconstructions; 3 IWAE bound."""

import functools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import LowRankMultivariateNormal, MultivariateNormal, kl_divergence
from torch.optim.swa_utils import AveragedModel, get_swa_multi_avg_fn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3325)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N, D, HID, Z, RANK, FLOWS, BS, STEPS, K_IW = 256, 64, 64, 8, 2, 2, 32, 4, 4
else:
    N, D, HID, Z, RANK, FLOWS, BS, STEPS, K_IW = 16384, 4096, 2048, 64, 8, 8, 512, 12, 32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def policy(ctx, op, *args, **kwargs):
    if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


context_fn = functools.partial(create_selective_checkpoint_contexts, policy)


class PlanarFlow(nn.Module):
    def __init__(self):
        super().__init__()
        self.u = nn.Parameter(torch.randn(Z) * 0.01)
        self.w = nn.Parameter(torch.randn(Z) * 0.01)
        self.b = nn.Parameter(torch.zeros(()))

    def forward(self, z):
        wu = self.w @ self.u
        u_hat = self.u + (F.softplus(wu) - 1 - wu) * self.w / (self.w @ self.w)
        a = torch.tanh(z @ self.w + self.b)
        psi = (1 - a * a)[..., None] * self.w
        return z + u_hat * a[..., None], torch.log((1 + psi @ u_hat).abs() + 1e-6)


class FlowVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(D, HID), nn.SiLU(), nn.Linear(HID, HID), nn.SiLU())
        self.loc = nn.Linear(HID, Z)
        self.factor = nn.Linear(HID, Z * RANK)
        self.diag = nn.Linear(HID, Z)
        self.flows = nn.ModuleList([PlanarFlow() for _ in range(FLOWS)])
        self.dec = nn.Sequential(
            nn.Linear(Z, HID), nn.SiLU(), nn.Linear(HID, HID), nn.SiLU(), nn.Linear(HID, D)
        )

    def posterior(self, x):
        h = self.enc(x)
        cov_factor = self.factor(h).view(-1, Z, RANK) * 0.1
        return LowRankMultivariateNormal(self.loc(h), cov_factor, F.softplus(self.diag(h)) + 1e-4)

    def decode(self, z):
        return self.dec(z)

    def flow(self, z0):
        logdet = z0.new_zeros(z0.shape[:-1])
        z = z0
        for f in self.flows:
            z, ld = f(z)
            logdet = logdet + ld
        return z, logdet


X = (torch.rand(N, D, device=device) < 0.3).float()
model = FlowVAE().to(device)
prior = MultivariateNormal(torch.zeros(Z, device=device), scale_tril=torch.eye(Z, device=device))
report("data and model")

opt = torch.optim.NAdam(model.parameters(), lr=1e-3, weight_decay=1e-4, decoupled_weight_decay=True)
sched = torch.optim.lr_scheduler.CyclicLR(
    opt, base_lr=1e-4, max_lr=2e-3, step_size_up=3, cycle_momentum=False
)
swa = AveragedModel(model, multi_avg_fn=get_swa_multi_avg_fn())
model.train()
for step in range(STEPS):
    xb = X[(step * BS) % N : (step * BS) % N + BS]
    q = model.posterior(xb)
    z0 = q.rsample()
    zk, logdet = model.flow(z0)
    logits = checkpoint(model.decode, zk, use_reentrant=False, context_fn=context_fn)
    rec = F.binary_cross_entropy_with_logits(logits, xb, reduction="none").sum(-1)
    loss = (rec + q.log_prob(z0) - logdet - prior.log_prob(zk)).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if step >= STEPS // 2:
        swa.update_parameters(model)
report("VAE training")

model.eval()
with torch.no_grad():
    xb = X[:BS]
    q = model.posterior(xb)
    kl = kl_divergence(q, prior)
    recon = torch.sigmoid(model.decode(q.mean))
    bce = F.binary_cross_entropy(recon, xb)
print("kl", float(kl.mean()), "bce", float(bce))
report("analytic KL and reconstructions")

avg = swa.module
with torch.no_grad():
    q = avg.posterior(xb)
    z0 = q.rsample((K_IW,))
    zk, logdet = avg.flow(z0)
    logits = avg.decode(zk)
    log_px = -F.binary_cross_entropy_with_logits(logits, xb.expand(K_IW, -1, -1), reduction="none").sum(-1)
    log_w = log_px + prior.log_prob(zk) - q.log_prob(z0) + logdet
    iwae = (torch.logsumexp(log_w, 0) - torch.log(torch.tensor(float(K_IW), device=device))).mean()
print("iwae", float(iwae))
report("IWAE bound")
