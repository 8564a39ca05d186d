# blind272/jm01 with one full collection (gc.collect()) before HF step 1 and a print of every generation-2
# collection: under the twin (vramscope run --gpu h200 THIS) its phase 1 matches the H100 record, showing the
# rest of jm01's miss is when CPython collects the linearized graphs' reference cycles (j272, session 61)
"""Hessian-free optimization (Martens 2010) of the classic deep autoencoder (784-1000-500-250-30 and
mirrored, here widened to 784-2048-1024-512-32), written on torch.func: the parameters as a dict of
detached tensors, `functional_call` of the module, `torch.func.vjp` for J^T u (gradient and the
Gauss-Newton product's second half) and, new here, `torch.func.linearize` for J v: the forward is run once
and its JVP traced with make_fx over the real CUDA tensors (tangents are 0-d `new_empty` expanded), the
primal-only part constant-folded, and the returned `jvp_fn` replays the traced graph at each of the 10
conjugate-gradient iterations (Gauss-Newton matrix for sigmoid + binary cross-entropy: J^T diag(s(1-s))/N J,
Tikhonov damping 1e-2 adapted by the reduction ratio, CG warm-started from the previous direction, 0.95
decay, the better of the 5th and 10th CG iterates taken and the step accepted or not with `torch.where`
on the GPU: no value-dependent Python branch). Synthetic 784-d "images" in [0, 1], batch 16,384, fp32
with TF32 off (CG needs the precision). Phase 1: 3 HF steps with linearize. Phase 2: 2 HF steps with
`torch.func.jvp` recomputing the forward in every CG iteration (no linearized graph kept). Phase 3:
reconstruction error of 65,536 samples under no_grad in chunks of 16,384. Fixed sizes. 4 phases."""

import gc

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, jvp, linearize, vjp


def _cb(phase, info):
    if phase == "stop" and info["generation"] == 2:
        print("GC gen2 collected", info["collected"], "alloc now", torch.cuda.memory_allocated(), flush=True)


gc.callbacks.append(_cb)

torch.manual_seed(2721)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
N = 16384
DIMS = [784, 2048, 1024, 512, 32]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        enc, dec = [], []
        for i in range(len(DIMS) - 1):
            enc.append(nn.Linear(DIMS[i], DIMS[i + 1]))
            if i < len(DIMS) - 2:
                enc.append(nn.Sigmoid())
        rd = DIMS[::-1]
        for i in range(len(rd) - 1):
            dec.append(nn.Linear(rd[i], rd[i + 1]))
            if i < len(rd) - 2:
                dec.append(nn.Sigmoid())
        self.enc, self.dec = nn.Sequential(*enc), nn.Sequential(*dec)

    def forward(self, x):
        return self.dec(self.enc(x))  # logits


def tdot(a, b):
    return sum((x * y).sum() for x, y in zip(a.values(), b.values(), strict=True))


def tadd(a, b, s=1.0):
    return {k: a[k] + s * b[k] for k in a}


model = AutoEncoder().to(dev)
params = {k: v.detach() for k, v in model.named_parameters()}
proto = torch.rand(64, 784, device=dev)
codes = torch.randint(0, 64, (N * 4,), device=dev)
data = (proto[codes] + 0.1 * torch.randn(N * 4, 784, device=dev)).clamp_(0, 1)
report("setup")


def loss_of(logits, x):
    return F.binary_cross_entropy_with_logits(logits, x, reduction="sum") / x.shape[0]


def hf_step(params, x, damping, d_prev, use_linearize):
    def f(p):
        return functional_call(model, p, (x,))

    logits, vjp_fn = vjp(f, params)
    loss = loss_of(logits, x)
    s = torch.sigmoid(logits)
    grad = vjp_fn((s - x) / x.shape[0])[0]
    h = s * (1 - s) / x.shape[0]
    if use_linearize:
        _, jvp_fn = linearize(f, params)

        def Jv(v):
            return jvp_fn(v)

    else:

        def Jv(v):
            return jvp(f, (params,), (v,))[1]

    def Gv(v):
        return tadd(vjp_fn(h * Jv(v))[0], v, damping)

    # CG on G d = -grad, warm start
    d = {k: 0.95 * v for k, v in d_prev.items()}
    r = tadd({k: -g for k, g in grad.items()}, Gv(d), -1.0)
    p = dict(r)
    rr = tdot(r, r)
    iterates = []
    for i in range(10):
        Gp = Gv(p)
        alpha = rr / tdot(p, Gp)
        d = tadd(d, p, alpha)
        r = tadd(r, Gp, -alpha)
        rr_new = tdot(r, r)
        p = tadd(r, p, rr_new / rr)
        rr = rr_new
        if i in (4, 9):
            iterates.append(d)
    # backtracking over the kept CG iterates and the Levenberg-Marquardt damping rule, without a
    # host sync: the choices are made on the GPU with torch.where
    with torch.no_grad():
        c5, c10 = iterates
        l5 = loss_of(functional_call(model, tadd(params, c5), (x,)), x)
        l10 = loss_of(functional_call(model, tadd(params, c10), (x,)), x)
        take10 = l10 <= l5
        best = {k: torch.where(take10, c10[k], c5[k]) for k in c5}
        best_loss = torch.minimum(l5, l10)
        pred = tdot(grad, best) + 0.5 * tdot(best, Gv(best))
        rho = (best_loss - loss) / pred
        accept = best_loss < loss
        damping = damping * torch.where(rho > 0.75, 2 / 3, torch.where(rho < 0.25, 1.5, 1.0))
        new = {k: torch.where(accept, params[k] + best[k], params[k]) for k in params}
    return new, damping, d, torch.minimum(best_loss, loss)


damping = torch.tensor(1e-2, device=dev)
d_prev = {k: torch.zeros_like(v) for k, v in params.items()}
for step in range(3):
    x = data[step * N % data.shape[0] :][:N]
    if step == 1:
        gc.collect()
    params, damping, d_prev, loss = hf_step(params, x, damping, d_prev, True)
    print("step end alloc", torch.cuda.memory_allocated(), gc.get_count())
    print(f"HF(linearize) step {step} loss {loss.item():.4f} damping {damping.item():.4g}")
report("hf_linearize")

for step in range(3, 5):
    x = data[step * N % data.shape[0] :][:N]
    params, damping, d_prev, loss = hf_step(params, x, damping, d_prev, False)
    print("step end alloc", torch.cuda.memory_allocated(), gc.get_count())
    print(f"HF(jvp) step {step} loss {loss.item():.4f} damping {damping.item():.4g}")
report("hf_jvp")

with torch.no_grad():
    tot = 0.0
    for i in range(0, data.shape[0], N):
        x = data[i : i + N]
        tot += F.mse_loss(torch.sigmoid(functional_call(model, params, (x,))), x, reduction="sum").item()
print("eval mse", tot / data.shape[0])
report("eval")
