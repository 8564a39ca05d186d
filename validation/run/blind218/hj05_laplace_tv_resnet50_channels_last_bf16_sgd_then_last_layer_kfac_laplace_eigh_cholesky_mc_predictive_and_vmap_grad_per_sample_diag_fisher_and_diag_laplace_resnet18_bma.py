"""Laplace approximations (MacKay 1992; Daxberger et al. 2021, "Laplace Redux") around a trained network.

A torchvision resnet50 (random init, 100 classes) is trained briefly; its posterior is then approximated
post hoc. Last-layer KFAC Laplace: the GGN of the final linear layer factorises as G (x) A, with
A = sum phi phi^T over the (bias-augmented) penultimate features and G = sum diag(p) - p p^T over the softmax
outputs; both factors are damped by the prior precision and eigendecomposed (torch.linalg.eigh), the
predictive is sampled in function space (the logit covariance (phi^T A^-1 phi) G^-1 by the Cholesky factor of
G^-1, 64 MC draws).

Phases: 3 steps of SGD nesterov in channels_last under bf16 autocast at batch 128 x 224; last-layer KFAC
Laplace under inference_mode (features of 2,048 images in chunks of 256, the factors, eigh, the MC predictive
of 256 test images); the diagonal empirical Fisher of a 2-layer MLP head (2048 -> 1024 -> 100) on detached
features from per-sample gradients (torch.func.grad of a functional_call under torch.vmap, chunks of 256 of
4,096 samples); then empty_cache() and a diagonal Laplace of a whole torchvision resnet18 at 96 x 96 (BN in
eval mode, per-sample gradients of every parameter by vmap(grad) in chunks of 16 of 256 samples, fp32) and
Bayesian model averaging of 8 weight samples through functional_call under no_grad. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2185)
device = "cuda" if torch.cuda.is_available() else "cpu"
CLASSES = 100
IMG = 64 if SMALL else 224
B_TRAIN, N_FIT, CHUNK, N_TEST = (4, 16, 8, 8) if SMALL else (128, 2048, 256, 256)
N_FISHER, F_CHUNK = (16, 8) if SMALL else (4096, 256)
R18_IMG, N_DIAG, D_CHUNK = (32, 8, 4) if SMALL else (96, 256, 16)
PRIOR_PREC, MC = 1.0, 64


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = torchvision.models.resnet50(num_classes=CLASSES).to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True, weight_decay=5e-5)
model.train()
for step in range(3):
    x = torch.randn(B_TRAIN, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (B_TRAIN,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"resnet50 loss {loss.item():.4f}")
report("resnet50 channels_last bf16 sgd nesterov")

# last-layer KFAC Laplace
del opt
model.eval()
body = nn.Sequential(*list(model.children())[:-1], nn.Flatten())
W = torch.cat([model.fc.weight, model.fc.bias[:, None]], 1).detach()  # [C, D+1]


def features(x):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        phi = body(x.contiguous(memory_format=torch.channels_last)).float()
    return torch.cat([phi, torch.ones_like(phi[:, :1])], 1)


with torch.inference_mode():
    D1 = W.shape[1]
    A = torch.zeros(D1, D1, device=device)
    G = torch.zeros(CLASSES, CLASSES, device=device)
    for i in range(N_FIT // CHUNK):
        phi = features(torch.randn(CHUNK, 3, IMG, IMG, device=device))
        p = (phi @ W.t()).softmax(-1)
        A += phi.t() @ phi
        G += torch.diag(p.sum(0)) - p.t() @ p
    A = A / N_FIT ** 0.5 + PRIOR_PREC ** 0.5 * torch.eye(D1, device=device)
    G = G / N_FIT ** 0.5 + PRIOR_PREC ** 0.5 * torch.eye(CLASSES, device=device)
    ea, va = torch.linalg.eigh(A)
    eg, vg = torch.linalg.eigh(G)
    A_inv = (va / ea) @ va.t()
    G_inv = (vg / eg) @ vg.t()
    phi = features(torch.randn(N_TEST, 3, IMG, IMG, device=device))
    f_mu = phi @ W.t()
    s = ((phi @ A_inv) * phi).sum(1)  # phi^T A^-1 phi
    L_G = torch.linalg.cholesky(G_inv)  # logit covariance s_n G^-1 = (sqrt(s_n) L_G)(sqrt(s_n) L_G)^T
    eps = torch.randn(MC, N_TEST, CLASSES, device=device)
    f = f_mu + s.clamp_min(0).sqrt()[:, None] * (eps @ L_G.t())
    p_mc = f.softmax(-1).mean(0)
    print(f"kfac laplace predictive entropy {(-(p_mc * p_mc.clamp_min(1e-12).log()).sum(-1)).mean().item():.4f}")
    del L_G, eps, f
report("last layer kfac laplace eigh cholesky inference_mode")

# diagonal empirical Fisher of an MLP head by per-sample gradients
head = nn.Sequential(nn.Linear(2048, 1024), nn.GELU(), nn.Linear(1024, CLASSES)).to(device)
head_params = {k: v.detach() for k, v in head.named_parameters()}


def sample_loss(p, phi, y):
    logits = functional_call(head, p, (phi[None],))
    return F.cross_entropy(logits, y[None])


per_sample_grad = vmap(grad(sample_loss), in_dims=(None, 0, 0))
fisher = {k: torch.zeros_like(v) for k, v in head_params.items()}
for i in range(N_FISHER // F_CHUNK):
    with torch.no_grad():
        phi = features(torch.randn(F_CHUNK, 3, IMG, IMG, device=device))[:, :-1]
    y = torch.randint(0, CLASSES, (F_CHUNK,), device=device)
    grads = per_sample_grad(head_params, phi, y)
    for k, g in grads.items():
        fisher[k] += g.square().sum(0)
    del grads
print(f"head fisher trace {sum(v.sum() for v in fisher.values()).item():.4f}")
report("per-sample grad diag fisher head vmap")

# diagonal Laplace over a whole resnet18, per-sample gradients, BMA by functional_call
del model, body, head, fisher, head_params, A, G, A_inv, G_inv, va, vg, phi
if device == "cuda":
    torch.cuda.empty_cache()
net = torchvision.models.resnet18(num_classes=CLASSES).to(device).eval()
net_params = {k: v.detach() for k, v in net.named_parameters()}
net_buffers = {k: v.detach() for k, v in net.named_buffers()}


def net_sample_loss(p, x, y):
    logits = functional_call(net, (p, net_buffers), (x[None],))
    return F.cross_entropy(logits, y[None])


net_psg = vmap(grad(net_sample_loss), in_dims=(None, 0, 0))
diag = {k: torch.zeros_like(v) for k, v in net_params.items()}
for i in range(N_DIAG // D_CHUNK):
    x = torch.randn(D_CHUNK, 3, R18_IMG, R18_IMG, device=device)
    y = torch.randint(0, CLASSES, (D_CHUNK,), device=device)
    for k, g in net_psg(net_params, x, y).items():
        diag[k] += g.square().sum(0)
post_std = {k: (v + PRIOR_PREC).rsqrt() for k, v in diag.items()}
with torch.no_grad():
    x = torch.randn(256, 3, R18_IMG, R18_IMG, device=device)
    probs = torch.zeros(256, CLASSES, device=device)
    for s in range(8):
        sample = {k: net_params[k] + post_std[k] * torch.randn_like(post_std[k]) for k in net_params}
        probs += functional_call(net, (sample, net_buffers), (x,)).softmax(-1)
        del sample
    probs /= 8
print(f"diag laplace bma confidence {probs.max(-1).values.mean().item():.4f}")
report("diag laplace resnet18 per-sample grads bma")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
