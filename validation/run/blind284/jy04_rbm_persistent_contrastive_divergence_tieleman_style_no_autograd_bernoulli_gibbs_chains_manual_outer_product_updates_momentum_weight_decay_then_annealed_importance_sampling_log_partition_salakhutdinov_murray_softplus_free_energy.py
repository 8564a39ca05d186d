"""A binary restricted Boltzmann machine trained with persistent contrastive divergence (Tieleman,
ICML 2008) and evaluated with annealed importance sampling (Salakhutdinov & Murray, ICML 2008), written
the way the classic research code (Hinton's and Salakhutdinov's rbm.m / rbm_ais, and their PyTorch
ports) does it: no autograd at all (every tensor under torch.no_grad, requires_grad never set), the
gradient written out by hand as outer products, <v h>_data - <v h>_model, with momentum and L2 weight
decay applied in place to W (12,288 visible x 4,096 hidden, 64 x 64 x 3 binarised images), the visible
and hidden biases. Positive phase: p(h|v) = sigmoid(v W + c) of a 2,048 minibatch; negative phase: 8,192
persistent fantasy particles advanced by one block-Gibbs sweep per update (h ~ Bernoulli(sigmoid(v W +
c)), v ~ Bernoulli(sigmoid(h W^T + b)), torch.bernoulli with a seeded CUDA generator). 12 updates
(momentum switched from 0.5 to 0.9 after 5, as rbm.m does). Then AIS from the base-rate model (the
visible biases of the data's marginals, W = 0) to the trained RBM: 1,024 runs, 400 linearly spaced
inverse temperatures, at each a log-weight increment from the hidden-summed-out unnormalised log
probability (sum softplus(beta (v W + c)) + beta v b) and one Gibbs transition at that temperature;
log Z = logsumexp(log w) - log(runs) + log Z_base, then the average log-likelihood of 4,096 test images
from the free energy (softplus). Synthetic binary data from a hidden mixture of 32 prototypes, seeded.
2 phases + end."""

import math

import torch
import torch.nn.functional as F

torch.manual_seed(2844)
dev = "cuda"
NV, NH = 64 * 64 * 3, 4096
BATCH, PARTICLES = 2048, 8192

torch.set_grad_enabled(False)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


gen = torch.Generator(device=dev)
gen.manual_seed(2844)
prototypes = (torch.rand(32, NV, device=dev, generator=gen) < 0.3).float()


def data(n):
    which = torch.randint(0, 32, (n,), device=dev, generator=gen)
    flip = torch.rand(n, NV, device=dev, generator=gen) < 0.05
    v = prototypes[which]
    return torch.where(flip, 1.0 - v, v)


def sample_h(v, W, c, beta=1.0):
    p = torch.sigmoid(beta * (v @ W + c))
    return p, torch.bernoulli(p, generator=gen)


def sample_v(h, W, b, beta=1.0, b_base=None):
    pre = beta * (h @ W.t() + b)
    if b_base is not None:
        pre = pre + (1.0 - beta) * b_base
    p = torch.sigmoid(pre)
    return p, torch.bernoulli(p, generator=gen)


def free_energy(v, W, b, c):
    return -(v @ b) - F.softplus(v @ W + c).sum(-1)


# the model
W = 0.01 * torch.randn(NV, NH, device=dev, generator=gen)
b = torch.zeros(NV, device=dev)
c = torch.zeros(NH, device=dev)
dW, db, dc = torch.zeros_like(W), torch.zeros_like(b), torch.zeros_like(c)
train_mean = data(BATCH).mean(0).clamp(1e-3, 1 - 1e-3)
b.copy_(torch.log(train_mean / (1 - train_mean)))
fantasy = torch.bernoulli(train_mean.expand(PARTICLES, NV), generator=gen)
lr, wd = 0.01, 2e-4
report("setup")

for update in range(12):
    momentum = 0.5 if update < 5 else 0.9
    v0 = data(BATCH)
    ph0, _ = sample_h(v0, W, c)
    pos_vh = v0.t() @ ph0  # (NV, NH)
    pos_v, pos_h = v0.sum(0), ph0.sum(0)
    # one Gibbs sweep of the persistent chains
    _, hk = sample_h(fantasy, W, c)
    _, fantasy = sample_v(hk, W, b)
    phk, _ = sample_h(fantasy, W, c)
    neg_vh = fantasy.t() @ phk
    neg_v, neg_h = fantasy.sum(0), phk.sum(0)
    dW.mul_(momentum).add_(lr * ((pos_vh / BATCH - neg_vh / PARTICLES) - wd * W))
    db.mul_(momentum).add_(lr * (pos_v / BATCH - neg_v / PARTICLES))
    dc.mul_(momentum).add_(lr * (pos_h / BATCH - neg_h / PARTICLES))
    W.add_(dW)
    b.add_(db)
    c.add_(dc)
    recon = torch.sigmoid(torch.bernoulli(ph0, generator=gen) @ W.t() + b)
    err = ((v0 - recon) ** 2).sum(1).mean()
    print(f"update {update} momentum {momentum} recon_err {err.item():.2f}")
    del v0, ph0, pos_vh, neg_vh, phk, hk, recon
report("pcd")

# annealed importance sampling, base rate model: W = 0, c = 0, visible biases b_base
RUNS, STEPS = 1024, 400
b_base = torch.log(train_mean / (1 - train_mean))
betas = torch.linspace(0.0, 1.0, STEPS + 1, device=dev)
log_z_base = F.softplus(b_base).sum() + NH * math.log(2.0)
v = torch.bernoulli(torch.sigmoid(b_base).expand(RUNS, NV), generator=gen)
log_w = torch.zeros(RUNS, device=dev)


def log_p_star(v, beta):
    # hidden units summed out, the base model's visible term mixed in at (1 - beta)
    return (1.0 - beta) * (v @ b_base) + beta * (v @ b) + F.softplus(beta * (v @ W + c)).sum(-1)


for k in range(1, STEPS + 1):
    bk_prev, bk = betas[k - 1], betas[k]
    log_w += log_p_star(v, bk) - log_p_star(v, bk_prev)
    _, h = sample_h(v, W, c, beta=bk)
    _, v = sample_v(h, W, b, beta=bk, b_base=b_base)
log_z = torch.logsumexp(log_w, 0) - math.log(RUNS) + log_z_base
test = data(4096)
avg_ll = (-free_energy(test, W, b, c)).mean() - log_z
print(f"ais log Z {log_z.item():.2f} test avg log-likelihood {avg_ll.item():.2f}")
report("ais")
print("done")
