"""Gradient-based hyperparameter optimization (Maclaurin et al. 2015, Franceschi et al. 2017) with the
optimizers' own `differentiable=True` mode: per-layer learning rates are 0-d tensors exp(log_lr) that require
grad, the inner model's weights are non-leaf copies of a base (so a differentiable optimizer may update them
in place), and K inner steps of `torch.optim.SGD(momentum=0.9, nesterov=True, differentiable=True,
foreach=False)` are unrolled (SGD's default foreach path on CUDA takes no tensor lr): each inner step clones
the weights for its forward (the in-place update must not touch a saved tensor), takes
`torch.autograd.grad(..., create_graph=True)`, sets `.grad` on the non-leaf weights and calls `opt.step()`,
whose `addcmul_(grad, lr, value=-1)` keeps every step's graph. The validation loss after K steps is
differentiated to the log learning rates (hypergradient) and those are updated with a meta Adam. MLP
1024-4096-4096-4096-100 (about 38 M parameters) on synthetic Gaussian-cluster data, fp32, TF32 off, batch
512. Phase 1: 3 hyper-iterations with 6 unrolled SGD steps. Phase 2: 2 hyper-iterations with 4 unrolled
`torch.optim.Adam(differentiable=True)` steps (tensor lr, exp_avg/exp_avg_sq kept in the graph). Phase 3:
plain leaf-parameter training with the learned rates (foreach SGD, 20 steps) and a no_grad eval of 8,192
samples. Fixed sizes; seeded."""

import math

import torch
import torch.nn.functional as F

torch.manual_seed(2762)
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
DIMS = [1024, 4096, 4096, 4096, 100]
B = 512


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def init_params():
    ps = []
    for i in range(len(DIMS) - 1):
        w = torch.randn(DIMS[i + 1], DIMS[i], device=dev) / math.sqrt(DIMS[i])
        b = torch.zeros(DIMS[i + 1], device=dev)
        ps += [w, b]
    return ps


def forward(ps, x):
    for i in range(0, len(ps), 2):
        x = F.linear(x, ps[i], ps[i + 1])
        if i + 2 < len(ps):
            x = F.gelu(x)
    return x


centers = torch.randn(100, DIMS[0], device=dev)
labels = torch.randint(0, 100, (32768,), device=dev)
data = centers[labels] + 2.0 * torch.randn(32768, DIMS[0], device=dev)


def batch(i):
    j = (i * B) % (data.shape[0] - B)
    return data[j : j + B], labels[j : j + B]


base = init_params()
n_layers = len(DIMS) - 1
log_lr = torch.full((n_layers,), math.log(0.02), device=dev, requires_grad=True)
meta = torch.optim.Adam([log_lr], lr=0.05)
report("setup")


def unrolled(opt_cls, k_steps, start, **kw):
    fast = [b.clone().requires_grad_(True) * 1.0 for b in base]  # non-leaf, requires grad
    lrs = log_lr.exp()
    groups = [{"params": fast[2 * i : 2 * i + 2], "lr": lrs[i]} for i in range(n_layers)]
    # foreach=False: SGD picks its foreach path on CUDA without asking about `differentiable`
    # (sgd.py passes differentiable=False to _default_to_fused_or_foreach), and
    # `_foreach_add_(..., alpha=lr)` takes no tensor lr
    opt = opt_cls(groups, differentiable=True, foreach=False, **kw)
    for s in range(k_steps):
        x, y = batch(start + s)
        w = [p.clone() for p in fast]
        loss = F.cross_entropy(forward(w, x), y)
        grads = torch.autograd.grad(loss, fast, create_graph=True)
        for p, g in zip(fast, grads, strict=True):
            p.grad = g
        opt.step()
    xv, yv = batch(start + 1000)
    val = F.cross_entropy(forward(fast, xv), yv)
    meta.zero_grad(set_to_none=True)
    val.backward(inputs=[log_lr])
    meta.step()
    return loss.item(), val.item()


for it in range(3):
    tr, va = unrolled(torch.optim.SGD, 6, it * 6, momentum=0.9, nesterov=True)
    print(
        f"sgd hyper-iter {it} train {tr:.4f} val {va:.4f} lr {[round(v, 4) for v in log_lr.exp().tolist()]}"
    )
report("unrolled_sgd_nesterov")

for it in range(2):
    tr, va = unrolled(torch.optim.Adam, 4, 100 + it * 4)
    print(f"adam hyper-iter {it} train {tr:.4f} val {va:.4f}")
report("unrolled_adam")

params = [b.clone().requires_grad_(True) for b in base]
lrs = log_lr.detach().exp().tolist()
opt = torch.optim.SGD(
    [{"params": params[2 * i : 2 * i + 2], "lr": lrs[i]} for i in range(n_layers)],
    momentum=0.9,
    nesterov=True,
    foreach=True,
)
for s in range(20):
    x, y = batch(200 + s)
    loss = F.cross_entropy(forward(params, x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
with torch.no_grad():
    correct = 0
    for i in range(0, 8192, 2048):
        correct += (forward(params, data[i : i + 2048]).argmax(-1) == labels[i : i + 2048]).sum().item()
print(f"retrain loss {loss.item():.4f} acc {correct / 8192:.3f}")
report("retrain_and_eval")
