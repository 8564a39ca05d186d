"""A continuous normalizing flow (FFJORD, Grathwohl et al. 2019) on random 64-dimensional data, with the ODE
solved by a fixed-step RK4 written by hand and the RNODE regularisers (Finlay et al. 2020).

The dynamics f(t, z) is an MLP of ConcatSquash layers (Linear(z) * sigmoid(Linear(t)) + Linear(t), width
1024, softplus) 64 -> 1024 -> 1024 -> 1024 -> 64. The augmented state integrates z, the log-density
change -tr(df/dz), the kinetic energy ||f||^2 and the Jacobian Frobenius norm ||eps^T df/dz||^2; the trace
is Hutchinson's estimate eps^T (df/dz) eps with one Rademacher probe per trajectory, the vector-Jacobian
product taken by torch.autograd.grad(create_graph=True) so that the loss back-propagates through it.

Phases: 2 steps at batch 4096 (RK4, 6 steps from t = 0 to 1, 24 function evaluations) in fp32 with Adam;
the test NLL with the exact trace (torch.func.vmap over torch.func.jacrev of the per-sample dynamics)
under no_grad at batch 1024, 4 RK4 steps; 16384 samples by the reverse ODE (8 steps, no trace) under
inference_mode; then 2 steps under bf16 autocast with Gaussian probes, gradient clipping and foreach
AdamW. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import jacrev, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2174)
device = "cuda" if torch.cuda.is_available() else "cpu"
DIM, WIDTH = (8, 64) if SMALL else (64, 1024)
BATCH, EVAL_BATCH, SAMPLES = (64, 32, 128) if SMALL else (4096, 1024, 16384)
LAMBDA_K, LAMBDA_J = 0.01, 0.01


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ConcatSquash(nn.Module):
    def __init__(self, din, dout):
        super().__init__()
        self.lin = nn.Linear(din, dout)
        self.gate = nn.Linear(1, dout)
        self.bias = nn.Linear(1, dout, bias=False)

    def forward(self, t, x):
        return self.lin(x) * torch.sigmoid(self.gate(t)) + self.bias(t)


class Dynamics(nn.Module):
    def __init__(self):
        super().__init__()
        dims = [DIM, WIDTH, WIDTH, WIDTH, DIM]
        self.layers = nn.ModuleList(ConcatSquash(a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, t, z):
        t = t.reshape(-1, 1)
        h = z
        for i, layer in enumerate(self.layers):
            h = layer(t, h)
            if i < len(self.layers) - 1:
                h = F.softplus(h)
        return h


def augmented(f, t, z, eps):
    """(dz/dt, -tr(df/dz) estimate, ||f||^2, ||eps^T J||^2), differentiable (create_graph)."""
    dz = f(t, z)
    vjp = torch.autograd.grad(dz, z, eps, create_graph=True)[0]
    div = (vjp * eps).sum(1)
    return dz, -div, dz.float().pow(2).sum(1), vjp.float().pow(2).sum(1)


def rk4_train(f, x, steps, gaussian=False):
    z = x.requires_grad_(True)
    eps = torch.randn_like(x) if gaussian else torch.randint(0, 2, x.shape, device=x.device).to(x.dtype) * 2 - 1
    n = x.shape[0]
    dlogp = torch.zeros(n, device=x.device)
    kin = torch.zeros(n, device=x.device)
    frob = torch.zeros(n, device=x.device)
    h = 1.0 / steps
    for i in range(steps):
        t0 = torch.full((1,), i * h, device=x.device)
        k1 = augmented(f, t0, z, eps)
        k2 = augmented(f, t0 + h / 2, z + h / 2 * k1[0], eps)
        k3 = augmented(f, t0 + h / 2, z + h / 2 * k2[0], eps)
        k4 = augmented(f, t0 + h, z + h * k3[0], eps)
        z = z + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        dlogp = dlogp + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        kin = kin + h / 6 * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
        frob = frob + h / 6 * (k1[3] + 2 * k2[3] + 2 * k3[3] + k4[3])
    return z, dlogp, kin, frob


def log_normal(z):
    return -0.5 * (z.float().pow(2) + math.log(2 * math.pi)).sum(1)


def exact_divergence(f, t, z):
    def single(zi):
        return f(t, zi.unsqueeze(0)).squeeze(0)

    jac = vmap(jacrev(single))(z)
    return jac.diagonal(dim1=1, dim2=2).sum(1)


@torch.no_grad()
def exact_nll(f, x, steps):
    z, dlogp, h = x, torch.zeros(x.shape[0], device=x.device), 1.0 / steps
    for i in range(steps):
        t0 = torch.full((1,), i * h, device=x.device)
        zs, ks = [z], []
        for c, dt in ((0.0, 0.0), (0.5, 0.5), (0.5, 0.5), (1.0, 1.0)):
            zc = z if not ks else z + dt * h * ks[-1][0]
            tc = t0 + c * h
            ks.append((f(tc, zc), -exact_divergence(f, tc, zc)))
        z = z + h / 6 * (ks[0][0] + 2 * ks[1][0] + 2 * ks[2][0] + ks[3][0])
        dlogp = dlogp + h / 6 * (ks[0][1] + 2 * ks[1][1] + 2 * ks[2][1] + ks[3][1])
    return -(log_normal(z) - dlogp).mean()


def reverse_sample(f, n, steps):
    z, h = torch.randn(n, DIM, device=device), 1.0 / steps
    for i in range(steps):
        t0 = torch.full((1,), 1.0 - i * h, device=device)
        k1 = f(t0, z)
        k2 = f(t0 - h / 2, z - h / 2 * k1)
        k3 = f(t0 - h / 2, z - h / 2 * k2)
        k4 = f(t0 - h, z - h * k3)
        z = z - h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return z


CENTERS = 2.0 * torch.randn(8, DIM, device=device)


def data(n):
    return CENTERS[torch.randint(0, 8, (n,), device=device)] + 0.3 * torch.randn(n, DIM, device=device)


def train_loss(f, x, steps, gaussian=False):
    z, dlogp, kin, frob = rk4_train(f, x, steps, gaussian)
    nll = -(log_normal(z) - dlogp)
    return (nll + LAMBDA_K * kin + LAMBDA_J * frob).mean(), nll.mean()


f = Dynamics().to(device)
opt = torch.optim.Adam(f.parameters(), lr=1e-3)
for it in range(2):
    loss, nll = train_loss(f, data(BATCH), 6)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"ffjord fp32 nll {nll.item():.4f} loss {loss.item():.4f}")
report("ffjord rk4 hutchinson fp32 adam")

f.eval()
test_nll = exact_nll(f, data(EVAL_BATCH), 4)
print(f"exact-trace test nll {test_nll.item():.4f}")
report("exact trace vmap jacrev no_grad")

with torch.inference_mode():
    x = reverse_sample(f, SAMPLES, 8)
    print(f"samples {tuple(x.shape)} std {x.std().item():.4f}")
del x
report("reverse ode sampling inference_mode")

f.train()
opt = torch.optim.AdamW(f.parameters(), lr=5e-4, weight_decay=1e-4, foreach=True)
for it in range(2):
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss, nll = train_loss(f, data(BATCH), 6, gaussian=True)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(f.parameters(), 1.0)
    opt.step()
print(f"ffjord bf16 nll {nll.item():.4f}")
report("ffjord bf16 gaussian probes foreach adamw")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
