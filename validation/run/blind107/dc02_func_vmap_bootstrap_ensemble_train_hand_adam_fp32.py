"""A deep ensemble trained as one program with torch.func: 16 MLP regressors (64 -> 1024 -> 1024 ->
1024 -> 2, SiLU, a mean and a log-variance head) stacked by stack_module_state, each fitted to its
own bootstrap resample of a batch (torch.randint indices on the GPU, gathered per member) with
a hand-written Gaussian negative log-likelihood through vmap(grad_and_value(functional_call)),
Adam written by hand with torch._foreach ops over the stacked parameters (bias-corrected, weight
decay), fp32, 4 steps of batch 2048, then the ensemble's predictive mean and variance (mixture of
Gaussians) on 32768 points under inference_mode; 5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10702)
M, DIN, W, B, NEVAL = (3, 8, 32, 64, 256) if SMALL else (16, 64, 1024, 2048, 32768)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(DIN, W), nn.SiLU(), nn.Linear(W, W), nn.SiLU(), nn.Linear(W, W), nn.SiLU()
        )
        self.head = nn.Linear(W, 2)

    def forward(self, x):
        mean, log_var = self.head(self.body(x)).unbind(-1)
        return mean, log_var.clamp(-8, 8)


members = [Regressor().to(device) for _ in range(M)]
params, buffers = stack_module_state(members)
base = copy.deepcopy(members[0]).to("meta")
del members
names = list(params)
weights = [params[n] for n in names]
exp_avg = [torch.zeros_like(w) for w in weights]
exp_avg_sq = [torch.zeros_like(w) for w in weights]
target_w = torch.randn(DIN, device=device)


def nll(p, b, x, y):
    mean, log_var = functional_call(base, (p, b), (x,))
    return 0.5 * (log_var + (y - mean).square() * torch.exp(-log_var)).mean()


step_fn = vmap(grad_and_value(nll), in_dims=(0, 0, 0, 0))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
lr, b1, b2, eps, wd = 1e-3, 0.9, 0.999, 1e-8, 1e-4
for step in range(4):
    x = torch.randn(B, DIN, device=device)
    y = torch.sin(x @ target_w) + 0.1 * torch.randn(B, device=device)
    idx = torch.randint(0, B, (M, B), device=device)
    grads, losses = step_fn(params, buffers, x[idx], y[idx])
    g = [grads[n] for n in names]
    t = step + 1
    with torch.no_grad():
        torch._foreach_add_(g, weights, alpha=wd)
        torch._foreach_lerp_(exp_avg, g, 1 - b1)
        torch._foreach_mul_(exp_avg_sq, b2)
        torch._foreach_addcmul_(exp_avg_sq, g, g, value=1 - b2)
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denom, math.sqrt(1 - b2**t))
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(weights, exp_avg, denom, value=-lr / (1 - b1**t))
    if device == "cuda":
        print(
            f"step {step} loss {losses.mean().item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, idx, grads, losses, g, denom
with torch.inference_mode():
    xe = torch.randn(NEVAL, DIN, device=device)
    means, log_vars = vmap(functional_call, in_dims=(None, 0, None))(base, (params, buffers), (xe,))
    mu = means.mean(0)
    var = (log_vars.exp() + means.square()).mean(0) - mu.square()
if device == "cuda":
    print(
        f"predict {tuple(mu.shape)} var {var.mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
