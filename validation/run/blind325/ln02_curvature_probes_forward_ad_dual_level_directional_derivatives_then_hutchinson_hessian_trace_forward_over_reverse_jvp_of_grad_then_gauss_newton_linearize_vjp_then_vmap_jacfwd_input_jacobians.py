"""Curvature diagnostics of a trained MLP classifier with the forward-mode and functional autograd APIs:
directional derivatives of the logits along random parameter directions with torch.autograd.forward_ad
(dual tensors made with make_dual inside dual_level, the parameters swapped in through
torch.func.functional_call); Hutchinson estimates of the loss Hessian trace with forward-over-reverse
(torch.func.jvp of torch.func.grad) and Rademacher probes; Gauss-Newton vector products from
torch.func.linearize (the model's linearized output) composed with torch.func.vjp; and per-example input
Jacobians of the logits with vmap(jacfwd) in chunks, reduced to Frobenius norms.

Phases: 0 model and data, a few Adam steps; 1 forward_ad directional derivatives (8 directions);
2 Hutchinson trace, 6 probes of jvp(grad); 3 Gauss-Newton products via linearize + vjp (6 vectors);
4 vmap(jacfwd) input Jacobians over 4,096 examples in chunks of 256."""

import os

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn
from torch.func import functional_call, grad, jacfwd, jvp, linearize, vjp, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3252)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, D, H, C = (256, 32, 64, 10) if SMALL else (8192, 784, 1024, 10)
NJ, CH = (512, 128) if SMALL else (4096, 256)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = nn.Sequential(
    nn.Linear(D, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(), nn.Linear(H, C)
).to(device)
x = torch.randn(B, D, device=device)
t = torch.randint(0, C, (B,), device=device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(5):
    opt.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), t).backward()
    opt.step()
del opt
model.requires_grad_(False)
params = {k: v.detach() for k, v in model.named_parameters()}
names = list(params)
report("setup")


# 1: forward-mode directional derivatives of the logits
def random_direction():
    return {k: torch.randn_like(v) for k, v in params.items()}


dnorms = []
for _ in range(8):
    tangents = random_direction()
    with fwAD.dual_level():
        dual = {k: fwAD.make_dual(params[k], tangents[k]) for k in names}
        out = functional_call(model, dual, (x,))
        dnorms.append(fwAD.unpack_dual(out).tangent.norm())
    del tangents, dual, out
print(f"mean directional derivative norm {torch.stack(dnorms).mean().item():.4f}")
report("forward_ad")


# 2: Hutchinson Hessian trace with forward-over-reverse
def loss_of(p):
    return nn.functional.cross_entropy(functional_call(model, p, (x,)), t)


grad_fn = grad(loss_of)
estimates = []
for _ in range(6):
    v = {k: torch.randint(0, 2, p.shape, device=device).float().mul_(2).sub_(1) for k, p in params.items()}
    _, hv = jvp(grad_fn, (params,), (v,))
    estimates.append(sum((hv[k] * v[k]).sum() for k in names))
    del v, hv
print(f"hessian trace estimate {torch.stack(estimates).mean().item():.3f}")
report("hutchinson")


# 3: Gauss-Newton vector products: J^T H_out J v with the linearized model
def logits_of(p):
    return functional_call(model, p, (x,))


logits, jvp_fn = linearize(logits_of, params)
probs = logits.softmax(-1)
_, vjp_fn = vjp(logits_of, params)
gnorms = []
for _ in range(6):
    v = random_direction()
    jv = jvp_fn(v)
    # Hessian of softmax cross-entropy w.r.t. logits: diag(p) - p p^T
    hjv = probs * jv - probs * (probs * jv).sum(-1, keepdim=True)
    (gv,) = vjp_fn(hjv / B)
    gnorms.append(torch.sqrt(sum((g * g).sum() for g in gv.values())))
    del v, jv, hjv, gv
print(f"mean GGN product norm {torch.stack(gnorms).mean().item():.4f}")
del logits, jvp_fn, vjp_fn, probs
report("gauss_newton")


# 4: per-example input Jacobians with vmap(jacfwd), chunked
def single_logits(xi):
    return functional_call(model, params, (xi.unsqueeze(0),)).squeeze(0)


jac_fn = vmap(jacfwd(single_logits))
xs = torch.randn(NJ, D, device=device)
fro = torch.empty(NJ, device=device)
for s in range(0, NJ, CH):
    J = jac_fn(xs[s : s + CH])
    torch.linalg.matrix_norm(J, ord="fro", out=fro[s : s + CH])
    del J
print(f"mean input-Jacobian Frobenius norm {fro.mean().item():.4f}")
report("input_jacobians")
