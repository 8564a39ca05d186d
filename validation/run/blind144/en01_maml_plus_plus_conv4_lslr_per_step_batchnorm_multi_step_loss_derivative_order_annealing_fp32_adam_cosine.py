"""MAML++ (Antoniou, Edwards and Storkey, "How to train your MAML", written after their
HowToTrainYourMAMLPytorch): the 4-block convolutional learner (48 filters, 3 x 3, BatchNorm, ReLU,
max pooling, a linear head) written as a function of a parameter dict (F.conv2d / F.batch_norm /
F.linear), per-step batch norm (running statistics and affine weights per inner step, BNRS + BNWB),
learned per-layer per-step inner learning rates (LSLR), 5 inner SGD steps on 5-way 5-shot 84 x 84
support sets with the gradients from torch.autograd.grad, the multi-step loss (the query loss after
every inner step, weighted by importance annealed towards the last step), derivative-order
annealing (first-order meta-steps, create_graph=False, for the first epoch; second order,
create_graph=True, after), a meta-batch of 4 tasks, fp32, Adam with a cosine schedule; 2
first-order and 2 second-order meta-steps, then the evaluation's adaptation on 8 tasks with 15
queries a class; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14401)
WAYS, SHOT, QUERY, HW, FILT = (5, 1, 2, 28, 8) if SMALL else (5, 5, 15, 84, 48)
TASKS, INNER, EVAL_TASKS = (2, 2, 2) if SMALL else (4, 5, 8)
FIRST_ORDER_STEPS, SECOND_ORDER_STEPS = 2, 2
device = "cuda" if torch.cuda.is_available() else "cpu"


def init_learner():
    params, buffers = {}, {}
    cin = 3
    for i in range(4):
        w = torch.empty(FILT, cin, 3, 3)
        nn.init.xavier_uniform_(w)
        params[f"conv{i}.weight"] = w
        params[f"conv{i}.bias"] = torch.zeros(FILT)
        params[f"norm{i}.weight"] = torch.ones(INNER, FILT)
        params[f"norm{i}.bias"] = torch.zeros(INNER, FILT)
        buffers[f"norm{i}.running_mean"] = torch.zeros(INNER, FILT)
        buffers[f"norm{i}.running_var"] = torch.ones(INNER, FILT)
        cin = FILT
    feat = FILT * (HW // 16) ** 2
    w = torch.empty(WAYS, feat)
    nn.init.xavier_uniform_(w)
    params["linear.weight"] = w
    params["linear.bias"] = torch.zeros(WAYS)
    params = {k: nn.Parameter(v.to(device)) for k, v in params.items()}
    buffers = {k: v.to(device) for k, v in buffers.items()}
    return params, buffers


def learner(x, p, buffers, step, training=True):
    for i in range(4):
        x = F.conv2d(x, p[f"conv{i}.weight"], p[f"conv{i}.bias"], padding=1)
        x = F.batch_norm(
            x,
            buffers[f"norm{i}.running_mean"][step],
            buffers[f"norm{i}.running_var"][step],
            p[f"norm{i}.weight"][step],
            p[f"norm{i}.bias"][step],
            training=training,
            momentum=0.1,
        )
        x = F.max_pool2d(F.relu(x), 2)
    return F.linear(x.flatten(1), p["linear.weight"], p["linear.bias"])


params, buffers = init_learner()
inner_names = [k for k in params if not k.startswith("norm")]
lslr = nn.ParameterDict(
    {k.replace(".", "-"): nn.Parameter(torch.full((INNER + 1,), 0.1, device=device)) for k in inner_names}
)
meta_params = list(params.values()) + list(lslr.parameters())
meta_opt = torch.optim.Adam(meta_params, lr=1e-3, amsgrad=False)
total = FIRST_ORDER_STEPS + SECOND_ORDER_STEPS
sched = torch.optim.lr_scheduler.CosineAnnealingLR(meta_opt, T_max=total, eta_min=1e-5)


def task_batch(n):
    xs = torch.randn(n, WAYS * SHOT, 3, HW, HW, device=device)
    ys = torch.arange(WAYS, device=device).repeat_interleave(SHOT).expand(n, -1)
    xq = torch.randn(n, WAYS * QUERY, 3, HW, HW, device=device)
    yq = torch.arange(WAYS, device=device).repeat_interleave(QUERY).expand(n, -1)
    return xs, ys, xq, yq


def msl_weights(epoch):
    w = torch.full((INNER,), 1.0 / INNER)
    decay = 1.0 / INNER / 10
    floor = 0.03 / INNER
    for i in range(INNER - 1):
        w[i] = max(w[i] - epoch * decay, floor)
    w[-1] = 1.0 - w[:-1].sum()
    return w.to(device)


def adapt(xs, ys, xq, yq, second_order, weights, training=True):
    fast = dict(params)
    losses = []
    for step in range(INNER):
        support_loss = F.cross_entropy(learner(xs, fast, buffers, step, training), ys)
        names = [k for k in inner_names]
        grads = torch.autograd.grad(
            support_loss, [fast[k] for k in names], create_graph=second_order, allow_unused=True
        )
        for k, g in zip(names, grads):
            if not second_order:
                g = g.detach()
            fast[k] = fast[k] - lslr[k.replace(".", "-")][step] * g
        if weights is not None:
            q = learner(xq, fast, buffers, step, training)
            losses.append(weights[step] * F.cross_entropy(q, yq))
    if weights is None:
        q = learner(xq, fast, buffers, INNER - 1, training)
        return F.cross_entropy(q, yq), (q.argmax(1) == yq).float().mean()
    return sum(losses), None


if device == "cuda":
    print(f"learner {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for it in range(total):
    second_order = it >= FIRST_ORDER_STEPS
    weights = msl_weights(it)
    xs, ys, xq, yq = task_batch(TASKS)
    meta_opt.zero_grad(set_to_none=True)
    meta_loss = 0.0
    for t in range(TASKS):
        loss, _ = adapt(xs[t], ys[t], xq[t], yq[t], second_order, weights)
        (loss / TASKS).backward()
        meta_loss += loss.item() / TASKS
    for p in meta_params:
        if p.grad is not None:
            p.grad.clamp_(-10, 10)
    meta_opt.step()
    sched.step()
    del xs, xq, loss
    if device == "cuda" and it in (FIRST_ORDER_STEPS - 1, total - 1):
        print(
            f"meta-step {it} {'second' if second_order else 'first'}-order loss {meta_loss:.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

xs, ys, xq, yq = task_batch(EVAL_TASKS)
accs = []
for t in range(EVAL_TASKS):
    loss, acc = adapt(xs[t], ys[t], xq[t], yq[t], False, None)
    accs.append(acc.item())
del xs, xq, loss
if device == "cuda":
    print(
        f"eval acc {sum(accs) / len(accs):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

state = {
    "params": {k: v.detach().clone() for k, v in params.items()},
    "lslr": lslr.state_dict(),
    "buffers": {k: v.clone() for k, v in buffers.items()},
    "opt": meta_opt.state_dict(),
}
if device == "cuda":
    print(
        f"checkpoint copy {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()} lr {sched.get_last_lr()[0]:.2e}"
    )
