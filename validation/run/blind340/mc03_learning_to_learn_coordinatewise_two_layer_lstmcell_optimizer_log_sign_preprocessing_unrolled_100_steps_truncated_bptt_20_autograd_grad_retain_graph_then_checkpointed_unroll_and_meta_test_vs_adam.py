"""A learned optimizer as in "Learning to learn by gradient descent by gradient descent" (Andrychowicz et al.,
2016), written the way its PyTorch re-implementations do it: a coordinatewise two-layer LSTM (`nn.LSTMCell`,
hidden 20, shared across all ~270k coordinates of the optimizee) reads each coordinate's gradient through
the paper's log/sign preprocessing (p = 10, `torch.where` on |g| >= e^-p) and outputs its update times 0.1.
The optimizee is an MLP 784-256-256-10 written functionally (`F.linear` over a list of tensors) trained on
MNIST-shaped data labelled by a random teacher, all on the GPU. Meta-training unrolls 100 optimizee steps:
each step's optimizee loss is added to the meta-loss, its gradients are taken with
`torch.autograd.grad(loss, params, retain_graph=True)` and detached (no second derivatives, as in the paper),
the LSTM proposes the update and the new parameters are `p + update` (still in the graph); every 20 steps
the meta-loss is backpropagated through the unrolled optimizee and LSTM (truncated BPTT), Adam steps the
LSTM, and parameters and LSTM states are detached.

Phases: 0 data pool, teacher, learned optimizer, meta Adam; 1 one meta-training episode (100 steps, 5
truncations of 20, batch 128); 2 one episode with truncations of 50 whose LSTM steps are each wrapped in
`torch.utils.checkpoint.checkpoint(use_reentrant=False)`; 3 meta-test: the learned optimizer trains a
larger optimizee (784-1024-1024-10, 1.9M coordinates) for 200 steps, its LSTM under no_grad and the update
applied in place; 4 the same optimizee from the same initialisation trained by torch.optim.Adam (foreach)
for 200 steps."""

import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3403)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    POOL, B, HID, HID_TEST, UNROLL, TRUNC, TRUNC2, TEST_STEPS = 2048, 32, 32, 64, 10, 5, 10, 10
else:
    POOL, B, HID, HID_TEST, UNROLL, TRUNC, TRUNC2, TEST_STEPS = 60000, 128, 256, 1024, 100, 20, 50, 200
LSTM_H, P = 20, 10.0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


X = torch.randn(POOL, 784, device=device)
with torch.no_grad():
    teacher = nn.Sequential(nn.Linear(784, 64), nn.Tanh(), nn.Linear(64, 10)).to(device)
    Y = teacher(X).argmax(dim=1)


def init_params(hid):
    sizes = [(hid, 784), (hid, hid), (10, hid)]
    params = []
    for out_f, in_f in sizes:
        bound = 1.0 / math.sqrt(in_f)
        params.append(torch.empty(out_f, in_f, device=device).uniform_(-bound, bound))
        params.append(torch.empty(out_f, device=device).uniform_(-bound, bound))
    return [p.requires_grad_() for p in params]


def optimizee_loss(params, idx):
    h = X[idx]
    for i in range(0, len(params) - 2, 2):
        h = F.relu(F.linear(h, params[i], params[i + 1]))
    return F.cross_entropy(F.linear(h, params[-2], params[-1]), Y[idx])


def preprocess(g):
    absg = g.abs()
    big = absg >= math.exp(-P)
    x1 = torch.where(big, torch.log(absg.clamp(min=1e-30)) / P, torch.full_like(g, -1.0))
    x2 = torch.where(big, torch.sign(g), g * math.exp(P))
    return torch.stack([x1, x2], dim=1)


class LSTMOptimizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell1 = nn.LSTMCell(2, LSTM_H)
        self.cell2 = nn.LSTMCell(LSTM_H, LSTM_H)
        self.out = nn.Linear(LSTM_H, 1)

    def forward(self, g, h1, c1, h2, c2):
        h1, c1 = self.cell1(preprocess(g), (h1, c1))
        h2, c2 = self.cell2(h1, (h2, c2))
        return self.out(h2).squeeze(-1) * 0.1, h1, c1, h2, c2


def zero_state(n):
    return [torch.zeros(n, LSTM_H, device=device) for _ in range(4)]


learned = LSTMOptimizer().to(device)
meta_opt = torch.optim.Adam(learned.parameters(), lr=1e-3)
n_coords = sum(p.numel() for p in init_params(HID))
print("optimizee coordinates", n_coords)
report("data pool teacher lstm optimizer")


def meta_episode(trunc, use_checkpoint):
    params = init_params(HID)
    state = zero_state(n_coords)
    meta_loss = 0.0
    for t in range(UNROLL):
        idx = torch.randint(0, POOL, (B,), device=device)
        loss = optimizee_loss(params, idx)
        grads = torch.autograd.grad(loss, params, retain_graph=True)
        meta_loss = meta_loss + loss
        g = torch.cat([gr.detach().flatten() for gr in grads])
        if use_checkpoint:
            upd, *state = checkpoint(learned, g, *state, use_reentrant=False)
        else:
            upd, *state = learned(g, *state)
        new, off = [], 0
        for p in params:
            new.append(p + upd[off : off + p.numel()].view_as(p))
            off += p.numel()
        params = new
        if (t + 1) % trunc == 0:
            meta_opt.zero_grad(set_to_none=True)
            (meta_loss / trunc).backward()
            torch.nn.utils.clip_grad_norm_(learned.parameters(), 1.0)
            meta_opt.step()
            print(f"  step {t + 1} meta-loss {(meta_loss / trunc).item():.4f}")
            params = [p.detach().requires_grad_() for p in params]
            state = [s.detach() for s in state]
            meta_loss = 0.0


meta_episode(TRUNC, use_checkpoint=False)
report("meta-training unroll 100 truncated bptt 20")

meta_episode(TRUNC2, use_checkpoint=True)
report("meta-training checkpointed lstm steps truncation 50")

test_init = [p.detach().clone() for p in init_params(HID_TEST)]
params = [p.clone().requires_grad_() for p in test_init]
n_test = sum(p.numel() for p in params)
state = zero_state(n_test)
for _t in range(TEST_STEPS):
    idx = torch.randint(0, POOL, (B,), device=device)
    loss = optimizee_loss(params, idx)
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        upd, *state = learned(torch.cat([g.flatten() for g in grads]), *state)
        off = 0
        for p in params:
            p.add_(upd[off : off + p.numel()].view_as(p))
            off += p.numel()
print(f"meta-test {n_test} coordinates, final loss {loss.item():.4f}")
del state, upd, grads, loss
report("meta-test learned optimizer 1.9m coordinates")

params = [p.clone().requires_grad_() for p in test_init]
adam = torch.optim.Adam(params, lr=1e-3, foreach=True)
for _t in range(TEST_STEPS):
    idx = torch.randint(0, POOL, (B,), device=device)
    loss = optimizee_loss(params, idx)
    adam.zero_grad(set_to_none=True)
    loss.backward()
    adam.step()
print(f"adam baseline final loss {loss.item():.4f}")
report("adam baseline same initialisation")
