"""Function-transform workloads written with `torch.func`, as a research code base would.

1. A deep ensemble of 16 MLP regressors (in 128 -> 1024 -> 1024 -> 1024 -> 8, SiLU) trained as one
   program: `stack_module_state` stacks the members' parameters, `vmap(grad(loss, has_aux=True))`
   over `functional_call` of a meta-device copy gives every member's gradients and predictions at
   once (each member sees its own bootstrap batch of 512), and a hand-written Adam updates the stacked
   tensors with `torch._foreach_*` ops. 5 steps.
2. A physics-informed network for the 2-D Poisson equation (-laplacian u = f on the unit square,
   4 x 256 tanh MLP): the Laplacian at 4,096 collocation points by `vmap(hessian(u))`, the boundary
   loss on 1,024 points, the gradient of the whole loss with respect to the parameters by
   `torch.autograd` through the second derivatives; Adam, 3 steps. Then `vmap(jacrev(u))` over 8,192
   points for the flux.
3. Forward-mode sensitivity of the ensemble's mean prediction: `torch.func.jvp` along a random input
   direction at batch 8,192, and `torch.autograd.forward_ad` dual tensors through member 0 as an
   nn.Module.
4. MAML on a sine-regression-like task family (MLP 1 -> 512 -> 512 -> 1): 32 tasks per meta-batch,
   5 inner SGD steps each written with `functional_call` and `torch.autograd.grad(create_graph=True)`,
   the outer Adam step through all inner steps. 2 meta-steps.
Phases: ensemble, PINN, forward-mode, MAML. 4 phases."""

import copy

import torch
import torch.nn as nn
from torch.func import functional_call, grad, hessian, jacrev, jvp, stack_module_state, vmap

torch.manual_seed(2402)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def member():
    return nn.Sequential(nn.Linear(128, 1024), nn.SiLU(), nn.Linear(1024, 1024), nn.SiLU(),
                         nn.Linear(1024, 1024), nn.SiLU(), nn.Linear(1024, 8))


M = 16
with torch.device(device):  # built on the GPU, not on the host first
    members = [member() for _ in range(M)]
params, buffers = stack_module_state(members)
base = copy.deepcopy(members[0]).to("meta")


def loss_fn(p, b, x, y):
    pred = functional_call(base, (p, b), (x,))
    return ((pred - y) ** 2).mean(), pred


grads_fn = vmap(grad(loss_fn, has_aux=True), in_dims=(0, 0, 0, 0))
names = list(params)
exp_avg = {k: torch.zeros_like(v) for k, v in params.items()}
exp_sq = {k: torch.zeros_like(v) for k, v in params.items()}
b1, b2, lr = 0.9, 0.999, 1e-3
for step in range(5):
    x = torch.randn(M, 512, 128, device=device)
    y = torch.randn(M, 512, 8, device=device)
    g, pred = grads_fn(params, buffers, x, y)
    ps, gs = [params[k] for k in names], [g[k] for k in names]
    ms, vs = [exp_avg[k] for k in names], [exp_sq[k] for k in names]
    with torch.no_grad():
        torch._foreach_lerp_(ms, gs, 1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
        denom = torch._foreach_sqrt(vs)
        torch._foreach_add_(denom, 1e-8)
        torch._foreach_addcdiv_(ps, ms, denom, value=-lr)
    print(f"ensemble step {step} spread {pred.std(0).mean().item():.4f}")
del x, y, g, pred, gs, denom
report("ensemble vmap grad has_aux")

with torch.device(device):
    pinn = nn.Sequential(nn.Linear(2, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256),
                         nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1))
popt = torch.optim.Adam(pinn.parameters(), lr=1e-3)


def u(pp, xy):
    return functional_call(pinn, pp, (xy.unsqueeze(0),)).squeeze()


for step in range(3):
    pp = dict(pinn.named_parameters())
    xy = torch.rand(4096, 2, device=device)
    hess = vmap(hessian(u, argnums=1), in_dims=(None, 0))(pp, xy)
    lap = hess.diagonal(dim1=-2, dim2=-1).sum(-1)
    f = 2 * torch.pi ** 2 * torch.sin(torch.pi * xy[:, 0]) * torch.sin(torch.pi * xy[:, 1])
    edge = torch.rand(1024, 2, device=device)
    edge[:512, 0] = torch.randint(0, 2, (512,), device=device).float()
    edge[512:, 1] = torch.randint(0, 2, (512,), device=device).float()
    loss = ((-lap - f) ** 2).mean() + 10 * pinn(edge).pow(2).mean()
    popt.zero_grad(set_to_none=True)
    loss.backward()
    popt.step()
    print(f"pinn step {step} loss {loss.item():.4f}")
with torch.no_grad():
    pts = torch.rand(8192, 2, device=device)
    flux = vmap(jacrev(u, argnums=1), in_dims=(None, 0))(dict(pinn.named_parameters()), pts)
    print("flux", tuple(flux.shape))
del hess, lap, f, edge, loss, pts, flux, xy
report("pinn vmap hessian and jacrev")


def ensemble_mean(x):
    return vmap(functional_call, in_dims=(None, 0, None))(base, (params, buffers), (x,)).mean(0)


with torch.no_grad():
    x = torch.randn(8192, 128, device=device)
    direction = torch.randn_like(x)
    out, tangent = jvp(ensemble_mean, (x,), (direction,))
    print("jvp", tuple(out.shape), tangent.abs().mean().item())
    import torch.autograd.forward_ad as fwAD

    net0 = members[0]
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, direction)
        t0 = fwAD.unpack_dual(net0(dual)).tangent
    print("forward_ad", tuple(t0.shape))
del x, direction, out, tangent, dual, t0
report("forward-mode jvp and dual tensors")

del params, buffers, exp_avg, exp_sq, members
with torch.device(device):
    meta_net = nn.Sequential(nn.Linear(1, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))
meta_opt = torch.optim.Adam(meta_net.parameters(), lr=1e-3)
TASKS, SHOTS, INNER = 32, 256, 5
for meta_step in range(2):
    amp = torch.rand(TASKS, 1, 1, device=device) * 4.9 + 0.1
    phase = torch.rand(TASKS, 1, 1, device=device) * torch.pi
    xs = torch.rand(TASKS, 2 * SHOTS, 1, device=device) * 10 - 5
    ys = amp * torch.sin(xs + phase)
    meta_loss = 0.0
    for t in range(TASKS):
        fast = dict(meta_net.named_parameters())
        for _ in range(INNER):
            pred = functional_call(meta_net, fast, (xs[t, :SHOTS],))
            inner = ((pred - ys[t, :SHOTS]) ** 2).mean()
            gs = torch.autograd.grad(inner, list(fast.values()), create_graph=True)
            fast = {k: w - 0.01 * gw for (k, w), gw in zip(fast.items(), gs)}
        qpred = functional_call(meta_net, fast, (xs[t, SHOTS:],))
        meta_loss = meta_loss + ((qpred - ys[t, SHOTS:]) ** 2).mean() / TASKS
    meta_opt.zero_grad(set_to_none=True)
    meta_loss.backward()
    meta_opt.step()
    print(f"maml meta-step {meta_step} loss {meta_loss.item():.4f}")
report("maml functional_call inner loop")
