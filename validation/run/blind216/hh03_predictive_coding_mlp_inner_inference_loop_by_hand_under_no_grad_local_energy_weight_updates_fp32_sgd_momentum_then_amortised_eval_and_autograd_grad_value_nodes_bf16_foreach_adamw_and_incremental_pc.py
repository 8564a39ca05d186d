"""Supervised predictive coding (Whittington & Bogacz 2017; Millidge et al.'s formulation) of a wide tanh MLP
3072 -> 8192 -> 8192 -> 8192 -> 1000 on random CIFAR-sized vectors with random one-hot targets.

Every layer holds value nodes x_l; predictions mu_{l+1} = W_l f(x_l) (f = tanh, f(x_0) = x_0 for the
input), errors e_l = x_l - mu_l, energy F = sum_l ||e_l||^2 / 2. Input and output nodes are clamped; the
hidden nodes start at the feed-forward pass and relax for T iterations; the weights then learn from the
local energy with the value nodes detached (each W_l sees only its own layer's error and input).

Phases: 3 training steps at batch 2048 with the inference loop written by hand under torch.no_grad
(dx_l = -e_l + f'(x_l) * (e_{l+1} W_l), in-place updates, T = 20) and SGD momentum on the local energy's
gradients, fp32; the amortised feed-forward prediction evaluated under inference_mode at batch 8192; 3
steps where the relaxation takes torch.autograd.grad of the energy with respect to the value nodes (leaf
tensors with requires_grad) under bf16 autocast, the weights updated by foreach AdamW; then
empty_cache() and incremental predictive coding (Salvatori et al. 2024: one energy backward per
iteration feeding both the value nodes and an SGD step of the weights, T = 8) for 2 batches. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2163)
device = "cuda" if torch.cuda.is_available() else "cpu"
DIMS = [3072, 256, 256, 256, 1000] if SMALL else [3072, 8192, 8192, 8192, 1000]
BATCH, EVAL_BATCH = (64, 256) if SMALL else (2048, 8192)
GAMMA = 0.1


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(DIMS[:-1], DIMS[1:])).to(device)
L = len(layers)


def act(x, l):
    return x if l == 0 else torch.tanh(x)


def predict(xs, l):  # mu_{l+1}
    return layers[l](act(xs[l], l))


def feedforward(x0):
    xs = [x0]
    for l in range(L):
        xs.append(predict(xs, l))
    return xs


def energy(xs):
    return sum(0.5 * (xs[l + 1] - predict(xs, l)).square().sum() for l in range(L)) / xs[0].shape[0]


def batch(n):
    x = torch.randn(n, DIMS[0], device=device)
    y = F.one_hot(torch.randint(0, DIMS[-1], (n,), device=device), DIMS[-1]).float()
    return x, y


# 1. inference by hand under no_grad, local weight updates, SGD momentum, fp32
opt = torch.optim.SGD(layers.parameters(), lr=0.01, momentum=0.9)
for it in range(3):
    x0, y = batch(BATCH)
    with torch.no_grad():
        xs = feedforward(x0)
        xs[-1] = y.clone()
        for t in range(20):
            errs = [None] + [xs[l + 1] - predict(xs, l) for l in range(L)]
            for l in range(1, L):
                fprime = 1 - torch.tanh(xs[l]).square()
                xs[l].add_(GAMMA * (-errs[l] + fprime * (errs[l + 1] @ layers[l].weight)))
            del errs
    loss = energy([x.detach() for x in xs])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del xs
print(f"pc energy {loss.item():.4f}")
report("pc by hand fp32")

# 2. amortised feed-forward prediction
with torch.inference_mode():
    x0, y = batch(EVAL_BATCH)
    out = feedforward(x0)[-1]
    acc = (out.argmax(1) == y.argmax(1)).float().mean().item()
print(f"eval acc {acc:.4f}")
report("eval")

# 3. relaxation by autograd.grad on the value nodes, bf16 autocast, foreach AdamW
del opt
opt = torch.optim.AdamW(layers.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
for it in range(3):
    x0, y = batch(BATCH)
    with torch.no_grad(), torch.autocast(**amp):
        xs = [x.float() for x in feedforward(x0)]
    xs[-1] = y
    hidden = [x.requires_grad_() for x in xs[1:-1]]
    for t in range(20):
        with torch.autocast(**amp):
            e = energy(xs)
        grads = torch.autograd.grad(e, hidden)
        with torch.no_grad():
            for x, g in zip(hidden, grads):
                x.sub_(GAMMA * g)
        del grads, e
    with torch.autocast(**amp):
        loss = energy([x.detach() for x in xs])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del xs, hidden
print(f"pc autograd energy {loss.item():.4f}")
report("pc autograd bf16 adamw")

# 4. incremental PC: weights and value nodes updated at every iteration
del opt
if device == "cuda":
    torch.cuda.empty_cache()
opt = torch.optim.SGD(layers.parameters(), lr=0.002)
for it in range(2):
    x0, y = batch(BATCH)
    with torch.no_grad():
        xs = feedforward(x0)
    xs[-1] = y
    hidden = [x.requires_grad_() for x in xs[1:-1]]
    for t in range(8):
        opt.zero_grad(set_to_none=True)
        e = energy(xs)
        e.backward()
        opt.step()
        with torch.no_grad():
            for x in hidden:
                x.sub_(GAMMA * x.grad)
                x.grad = None
    del xs, hidden
print(f"ipc energy {e.item():.4f}")
report("incremental pc")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
