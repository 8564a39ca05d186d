"""Deep canonical correlation analysis (Andrew et al. 2013) on two synthetic views of a shared latent: two
MLP encoders (1024-wide, BatchNorm, 64 outputs) trained to maximise the total canonical correlation of their
outputs. The loss builds the centred cross- and auto-covariances, whitens them with inverse square roots
from ``torch.linalg.eigh`` done in float64, and takes the trace norm of T = S11^-1/2 S12 S22^-1/2 with
``torch.linalg.svdvals``. A monitoring tool attached through the global hooks
``torch.nn.modules.module.register_module_forward_hook`` and ``register_module_full_backward_hook`` keeps
per-Linear activation and gradient-output norms (on the GPU, stacked once per step) during the first phase
of training; the handles are removed afterwards.

Phases: 0 data and encoders; 1 DCCA training with the global hooks, RMSprop, batch 4096, fp32 with TF32;
2 hooks removed, 20 more steps at batch 8192 with a StepLR; 3 eval: both views of 32768 samples encoded
under no_grad in chunks, the correlations by the same whitening, and a linear probe from the view-1
embedding to the latent by ``torch.linalg.lstsq``."""

import torch
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_hook, register_module_full_backward_hook

torch.manual_seed(5)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def encoder(d_in, width=1024, d_out=64):
    return nn.Sequential(
        nn.Linear(d_in, width),
        nn.BatchNorm1d(width),
        nn.Sigmoid(),
        nn.Linear(width, width),
        nn.BatchNorm1d(width),
        nn.Sigmoid(),
        nn.Linear(width, width),
        nn.BatchNorm1d(width),
        nn.Sigmoid(),
        nn.Linear(width, d_out),
    )


def make_views(n, g):
    z = torch.randn(n, 32, device=device, generator=g)
    v1 = torch.tanh(z @ A1) + 0.2 * torch.randn(n, 784, device=device, generator=g)
    v2 = torch.sin(z @ A2) + 0.2 * torch.randn(n, 512, device=device, generator=g)
    return z, v1, v2


def inv_sqrt(S, eps=1e-9):
    evals, evecs = torch.linalg.eigh(S)
    evals = evals.clamp_min(eps)
    return (evecs * evals.rsqrt().unsqueeze(0)) @ evecs.transpose(-1, -2)


def total_correlation(h1, h2, r1=1e-3, r2=1e-3):
    n = h1.shape[0]
    h1 = (h1 - h1.mean(0)).double()
    h2 = (h2 - h2.mean(0)).double()
    S12 = h1.T @ h2 / (n - 1)
    S11 = h1.T @ h1 / (n - 1) + r1 * torch.eye(h1.shape[1], device=h1.device, dtype=h1.dtype)
    S22 = h2.T @ h2 / (n - 1) + r2 * torch.eye(h2.shape[1], device=h2.device, dtype=h2.dtype)
    T = inv_sqrt(S11) @ S12 @ inv_sqrt(S22)
    return torch.linalg.svdvals(T)


g = torch.Generator(device=device).manual_seed(0)
A1 = torch.randn(32, 784, device=device, generator=g) / 4
A2 = torch.randn(32, 512, device=device, generator=g) / 4
z_all, v1_all, v2_all = make_views(65536, g)
f1, f2 = encoder(784).to(device), encoder(512).to(device)
report("data and encoders")

act_norms, grad_norms = [], []


def fwd_hook(module, args, output):
    if isinstance(module, nn.Linear):
        act_norms.append(output.detach().norm(dim=1).mean())


def bwd_hook(module, grad_input, grad_output):
    if isinstance(module, nn.Linear):
        grad_norms.append(grad_output[0].detach().norm())


handles = [register_module_forward_hook(fwd_hook), register_module_full_backward_hook(bwd_hook)]
opt = torch.optim.RMSprop(list(f1.parameters()) + list(f2.parameters()), lr=1e-3, alpha=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
history = []
for _step in range(20):
    idx = torch.randint(0, 65536, (4096,), device=device, generator=g)
    corr = total_correlation(f1(v1_all[idx]), f2(v2_all[idx]))
    loss = -corr.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    history.append(torch.stack(act_norms + grad_norms))
    act_norms.clear()
    grad_norms.clear()
for h in handles:
    h.remove()
stats = torch.stack(history)
print("corr", -loss.item(), "stats", tuple(stats.shape))
report("dcca training with global module hooks")

for _step in range(20):
    idx = torch.randint(0, 65536, (8192,), device=device, generator=g)
    corr = total_correlation(f1(v1_all[idx]), f2(v2_all[idx]))
    loss = -corr.sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
print("corr", -loss.item(), "lr", sched.get_last_lr())
report("dcca training at 8192 without hooks")

f1.eval()
f2.eval()
z_te, v1_te, v2_te = make_views(32768, g)
with torch.no_grad():
    h1 = torch.cat([f1(c) for c in v1_te.split(8192)])
    h2 = torch.cat([f2(c) for c in v2_te.split(8192)])
    corr = total_correlation(h1, h2)
    X = torch.cat([h1, torch.ones(h1.shape[0], 1, device=device)], dim=1)
    sol = torch.linalg.lstsq(X, z_te).solution
    r2 = 1 - (X @ sol - z_te).pow(2).sum() / (z_te - z_te.mean(0)).pow(2).sum()
print("test corr top5", corr[:5].tolist(), "probe r2", r2.item())
report("eval correlations and lstsq probe")
