"""Tabular regression with the optimizers that are rarely reached for, each in its natural setting:
full-batch Rprop (sign-based steps, foreach) over 262,144 rows through a 512-2048-2048-1 MLP; ASGD on
minibatches with a ChainedScheduler (ExponentialLR + LinearLR warm-down), then its running average of the
weights ('ax' in the optimizer state) swapped into the model with torch._foreach_copy_ for evaluation;
Adamax with maximize=True climbing a negated loss (capturable on CUDA) under CyclicLR without momentum
cycling; finally bfloat16 autocast with gradient accumulation over 4 micro-batches, the norm taken by
torch.nn.utils.get_total_norm over the grads and applied by clip_grads_with_norm_ (foreach), SGD Nesterov.

Phases: 0 data and model; 1 Rprop full batch (6 steps); 2 ASGD + ChainedScheduler (40 steps) and
averaged evaluation; 3 Adamax maximize + CyclicLR (40 steps); 4 bf16 autocast accumulation with
explicit norm clipping."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3251)
device = "cuda" if torch.cuda.is_available() else "cpu"
N, F, H, MB = (4096, 32, 64, 512) if SMALL else (262_144, 512, 2048, 8192)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


X = torch.randn(N, F, device=device)
w_true = torch.randn(F, 1, device=device) / F**0.5
y = torch.tanh(X @ w_true) + 0.1 * torch.randn(N, 1, device=device)


def make_model():
    return nn.Sequential(nn.Linear(F, H), nn.SiLU(), nn.Linear(H, H), nn.SiLU(), nn.Linear(H, 1)).to(device)


model = make_model()
loss_fn = nn.MSELoss()
report("data")

# 1: full-batch Rprop: one forward/backward over all rows per step
opt = torch.optim.Rprop(model.parameters(), lr=1e-3, etas=(0.5, 1.2), step_sizes=(1e-6, 1.0), foreach=True)
for _step in range(6):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(X), y)
    loss.backward()
    opt.step()
print(f"rprop loss {loss.item():.5f}")
del opt, loss
report("rprop")

# 2: ASGD on minibatches, chained schedulers, then evaluate with the averaged weights
opt = torch.optim.ASGD(model.parameters(), lr=5e-3, lambd=1e-4, alpha=0.75, t0=10, weight_decay=1e-5)
sched = torch.optim.lr_scheduler.ChainedScheduler(
    [
        torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.995),
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.5, total_iters=40),
    ]
)
perm = torch.randperm(N, device=device)
for step in range(40):
    idx = perm[(step * MB) % N : (step * MB) % N + MB]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(X[idx]), y[idx])
    loss.backward()
    opt.step()
    sched.step()
params = list(model.parameters())
backup = [p.detach().clone() for p in params]
with torch.no_grad():
    torch._foreach_copy_(params, [opt.state[p]["ax"] for p in params])
    avg_loss = sum(loss_fn(model(X[s : s + 4 * MB]), y[s : s + 4 * MB]) for s in range(0, N, 4 * MB))
    torch._foreach_copy_(params, backup)
print(f"asgd averaged loss {avg_loss.item():.5f}")
del opt, sched, backup, avg_loss, loss, perm, idx
report("asgd")

# 3: Adamax maximizing the negated loss, CyclicLR without momentum cycling
opt = torch.optim.Adamax(
    model.parameters(), lr=1e-3, maximize=True, capturable=(device == "cuda"), foreach=False
)
sched = torch.optim.lr_scheduler.CyclicLR(
    opt, base_lr=1e-4, max_lr=2e-3, step_size_up=10, mode="triangular2", cycle_momentum=False
)
gen = torch.Generator(device=device).manual_seed(7)
for _step in range(40):
    idx = torch.randint(0, N, (MB,), device=device, generator=gen)
    opt.zero_grad(set_to_none=True)
    objective = -loss_fn(model(X[idx]), y[idx])
    objective.backward()
    opt.step()
    sched.step()
print(f"adamax objective {objective.item():.5f}")
del opt, sched, objective, idx
report("adamax")

# 4: bf16 autocast, 4 micro-batches accumulated, norm by get_total_norm, clip by clip_grads_with_norm_
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, nesterov=True)
for step in range(10):
    opt.zero_grad(set_to_none=True)
    for micro in range(4):
        s = ((step * 4 + micro) * MB) % N
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            out = model(X[s : s + MB])
        loss = loss_fn(out.float(), y[s : s + MB]) / 4
        loss.backward()
    grads = [p.grad for p in model.parameters()]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm=1.0, total_norm=total, foreach=True)
    opt.step()
print(f"bf16 loss {loss.item() * 4:.5f} grad norm {total.item():.4f}")
report("bf16_clip")
