"""Hessian-free (truncated Newton) training of a deep autoencoder, Martens (2010) style, with torch.func:
a 1024-2048-1024-512-64-512-1024-2048-1024 MLP autoencoder on synthetic low-rank "curves" data (seeded),
fp32, batch 4,096, squared error on a sigmoid output. Its hidden activation is a custom
`torch.autograd.Function` (a scaled softplus-tanh "smooth ReLU") written for function transforms: a
static `forward` without ctx, `setup_context`, a `backward`, a `jvp` that reads what `ctx.save_for_forward`
kept, and `generate_vmap_rule = True`.
Phase 1: 3 Adam warm-up steps (ordinary `loss.backward()`, the Function's backward).
Phase 2: 2 Hessian-free steps: the gradient by `torch.func.vjp` of the loss over `functional_call`'s
parameter dict; the damped Gauss-Newton matrix-vector product Gv = J^T H J v by `torch.func.jvp` of the
network's outputs (forward mode through the custom Function's jvp) then `vjp` of the network; 8
conjugate-gradient iterations per step, Levenberg-Marquardt damping adjusted by the reduction ratio.
Phase 3: 2 more steps with `torch.func.linearize` (the network linearized once per step, its jvp function
reused by every CG iteration) and the transposed product from one `vjp` closure kept across iterations.
Phase 4: a curvature sketch: `vmap` over 8 random parameter directions of the jvp (the Function's
generated vmap rule) at batch 1,024, the Rayleigh quotients v^T G v / v^T v.
4 phases."""

import itertools

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, jvp, linearize, vjp, vmap

torch.manual_seed(2882)
dev = "cuda"
B, LR_ADAM, CG_ITERS = 4096, 1e-3, 8
WIDTHS = [1024, 2048, 1024, 512, 64, 512, 1024, 2048, 1024]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class SmoothReLU(torch.autograd.Function):
    """y = softplus(x) * (1 + tanh(x)) / 2, written for torch.func transforms."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return F.softplus(x) * (1 + torch.tanh(x)) * 0.5

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def _deriv(x):
        t = torch.tanh(x)
        return torch.sigmoid(x) * (1 + t) * 0.5 + F.softplus(x) * (1 - t * t) * 0.5

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        return gy * SmoothReLU._deriv(x)

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return x_t * SmoothReLU._deriv(x)


class AE(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(WIDTHS))

    def forward(self, x):
        for i, lin in enumerate(self.layers):
            x = lin(x)
            if i < len(self.layers) - 1 and i != 3:  # linear code layer
                x = SmoothReLU.apply(x)
        return x  # logits; the output is sigmoid(x)


model = AE().to(dev)
basis = torch.randn(32, 1024, device=dev)
data = torch.sigmoid(torch.randn(12 * B, 32, device=dev) @ basis * 0.4)


def batch(i, b=B):
    return data[(i * b) % data.shape[0] :][:b]


# --- phase 1: Adam warm-up ------------------------------------------------------------------------
adam = torch.optim.Adam(model.parameters(), lr=LR_ADAM)
for i in range(3):
    x = batch(i)
    loss = 0.5 * (torch.sigmoid(model(x)) - x).pow(2).sum(1).mean()
    loss.backward()
    adam.step()
    adam.zero_grad(set_to_none=True)
    print("adam", i, round(loss.item(), 4))
del adam
report("adam_warmup_custom_function_backward")

names = [n for n, _ in model.named_parameters()]
params = {n: p.detach() for n, p in model.named_parameters()}


def net(p, x):
    return functional_call(model, p, (x,))


def loss_of_out(z, x):
    return 0.5 * (torch.sigmoid(z) - x).pow(2).sum(1).mean()


def dot(a, b):
    return sum((a[n] * b[n]).sum() for n in names)


def cg(gv, g, iters):
    xk = {n: torch.zeros_like(g[n]) for n in names}
    r = {n: -g[n] for n in names}
    d = {n: r[n].clone() for n in names}
    rr = dot(r, r)
    for _ in range(iters):
        q = gv(d)
        alpha = rr / dot(d, q)
        for n in names:
            xk[n].add_(alpha * d[n])
            r[n].sub_(alpha * q[n])
        rr_new = dot(r, r)
        beta = rr_new / rr
        for n in names:
            d[n] = r[n] + beta * d[n]
        rr = rr_new
    return xk


lam = 1.0


def hf_step(i, use_linearize):
    global lam, params
    x = batch(i)
    z, net_vjp = vjp(lambda p: net(p, x), params)
    s = torch.sigmoid(z)
    dz = (s - x) * s * (1 - s) / x.shape[0]  # d loss / d logits
    (g,) = net_vjp(dz)
    h_diag = s * (1 - s) / x.shape[0]  # the sum-of-squares loss's Gauss-Newton Hessian on logits
    if use_linearize:
        _, jvp_fn = linearize(lambda p: net(p, x), params)
    else:

        def jvp_fn(v):
            return jvp(lambda p: net(p, x), (params,), (v,))[1]

    def gv(v):
        jv = jvp_fn(v)
        (out,) = net_vjp(h_diag * jv)
        return {n: out[n] + lam * v[n] for n in names}

    step_dir = cg(gv, g, CG_ITERS)
    old = loss_of_out(z, x)
    pred = dot(g, step_dir) + 0.5 * dot(step_dir, gv(step_dir))
    params = {n: params[n] + step_dir[n] for n in names}
    new = loss_of_out(net(params, x), x)
    rho = ((new - old) / pred).item()
    lam = lam * 1.5 if rho < 0.25 else (lam / 1.5 if rho > 0.75 else lam)
    print(
        "hf",
        i,
        "linearize" if use_linearize else "jvp",
        "loss",
        round(new.item(), 4),
        "lambda",
        round(lam, 3),
    )


with torch.no_grad():
    for i in range(3, 5):
        hf_step(i, use_linearize=False)
report("hf_gauss_newton_cg_jvp_vjp")

with torch.no_grad():
    for i in range(5, 7):
        hf_step(i, use_linearize=True)
report("hf_linearize_reused_jvp")

xs = batch(7, 1024)
dirs = {n: torch.randn(8, *params[n].shape, device=dev) for n in names}
with torch.no_grad():
    zs = net(params, xs)
    ss = torch.sigmoid(zs)
    hd = ss * (1 - ss) / xs.shape[0]
    jv = vmap(lambda v: jvp(lambda p: net(p, xs), (params,), (v,))[1])(dirs)  # (8, 1024, 1024)
    vgv = (jv * jv * hd).sum(dim=(1, 2))
    vv = sum(dirs[n].flatten(1).pow(2).sum(1) for n in names)
    rq = vgv / vv
print("rayleigh quotients", [round(v, 6) for v in rq.tolist()])
report("vmap_jvp_curvature_sketch")
