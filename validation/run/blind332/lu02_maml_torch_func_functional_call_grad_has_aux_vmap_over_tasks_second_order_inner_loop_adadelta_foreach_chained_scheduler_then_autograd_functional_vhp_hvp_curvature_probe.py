"""Second-order MAML for few-shot regression written with torch.func: the meta-model's parameters
are a dict passed through torch.func.functional_call, the inner loop takes torch.func.grad of the
support loss with has_aux=True (the aux is the support predictions), three inner SGD steps per task,
and the whole adaptation is torch.func.vmap'ed over a batch of tasks (randomness="different" for the
dropout), the query loss then backpropagates through the inner steps into the meta-parameters.
Outer optimizer Adadelta (foreach) under a ChainedScheduler (LinearLR warm-up and ExponentialLR);
afterwards curvature probes of the meta-loss with torch.autograd.functional.vhp and hvp on the head's
parameters (create_graph off), and a last adaptation of held-out tasks under no_grad-free evaluation.

Phases: 0 meta-model and task bank; 1 meta-training; 2 vhp/hvp curvature probes; 3 held-out adaptation."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3322)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N_TASKS, K_SHOT, Q, WIDTH, META_BATCH, META_STEPS, INNER = 64, 5, 10, 64, 4, 3, 2
else:
    N_TASKS, K_SHOT, Q, WIDTH, META_BATCH, META_STEPS, INNER = 4096, 64, 256, 1024, 32, 10, 3
INNER_LR = 0.01


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(4, WIDTH), nn.GELU(), nn.Dropout(0.1), nn.Linear(WIDTH, WIDTH), nn.GELU()
        )
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x):
        return self.head(self.body(x))


net = Regressor().to(device)
amp = torch.rand(N_TASKS, 1, 1, device=device) * 4 + 0.5
phase = torch.rand(N_TASKS, 1, 4, device=device) * 3.14
xs = torch.rand(N_TASKS, K_SHOT + Q, 4, device=device) * 10 - 5
ys = (amp * torch.sin(xs + phase)).sum(-1, keepdim=True)
report("meta-model and task bank")


def support_loss(params, x, y):
    pred = functional_call(net, params, (x,))
    return F.mse_loss(pred, y), pred


def adapt_and_query(params, xs_t, ys_t):
    xs_s, ys_s = xs_t[:K_SHOT], ys_t[:K_SHOT]
    xq, yq = xs_t[K_SHOT:], ys_t[K_SHOT:]
    fast = params
    for _ in range(INNER):
        g, _pred = grad(support_loss, has_aux=True)(fast, xs_s, ys_s)
        fast = {k: fast[k] - INNER_LR * g[k] for k in fast}
    return F.mse_loss(functional_call(net, fast, (xq,)), yq)


task_losses = vmap(adapt_and_query, in_dims=(None, 0, 0), randomness="different")
opt = torch.optim.Adadelta(net.parameters(), lr=1.0, rho=0.95, foreach=True)
sched = torch.optim.lr_scheduler.ChainedScheduler(
    [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.2, total_iters=4),
        torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.97),
    ]
)
net.train()
for step in range(META_STEPS):
    ids = torch.randint(0, N_TASKS, (META_BATCH,), device=device)
    params = dict(net.named_parameters())
    meta_loss = task_losses(params, xs[ids], ys[ids]).mean()
    opt.zero_grad()
    meta_loss.backward()
    opt.step()
    sched.step()
report("meta-training")

net.eval()
ids = torch.arange(META_BATCH, device=device)
body_params = {k: v.detach() for k, v in net.named_parameters() if not k.startswith("head.")}


def meta_loss_of_head(w, b):
    params = dict(body_params, **{"head.weight": w, "head.bias": b})
    return vmap(adapt_and_query, in_dims=(None, 0, 0), randomness="different")(
        params, xs[ids], ys[ids]
    ).mean()


head = (net.head.weight.detach(), net.head.bias.detach())
v = tuple(torch.randn_like(p) for p in head)
_, vhp_out = torch.autograd.functional.vhp(meta_loss_of_head, head, v)
_, hvp_out = torch.autograd.functional.hvp(meta_loss_of_head, head, v)
curv = sum((a * b).sum() for a, b in zip(vhp_out, v)) + sum((a * b).sum() for a, b in zip(hvp_out, v))
report("vhp/hvp curvature")

held = torch.arange(N_TASKS - META_BATCH, N_TASKS, device=device)
params = {k: v.detach() for k, v in net.named_parameters()}
held_loss = vmap(adapt_and_query, in_dims=(None, 0, 0), randomness="different")(params, xs[held], ys[held])
print("held-out", float(held_loss.mean()), "curv", float(curv))
report("held-out adaptation")
