"""A deep ensemble of 8 small ResNet-style CNNs (GroupNorm, 3 stages of 64/128/256 channels at 32 x
32) trained at once with torch.func: stack_module_state stacks the members' parameters and buffers,
vmap(functional_call) over a copy of the model on the meta device runs them (each member on its
own bootstrap-resampled batch of 256), and a plain torch.optim.AdamW steps the stacked parameters;
bf16 autocast, 3 steps. Then the ensemble's predictive entropy on a test batch under no_grad, the
input sensitivity of the ensemble mean by torch.func.jvp along a random direction and by
torch.func.vjp of the mean log-probabilities, and a Hessian-vector product of member 0's loss in
its parameters by forward-over-reverse (jvp of grad), in fp32; 7 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, jvp, stack_module_state, vjp, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12606)
E, B, WIDTHS = (2, 8, (8, 16, 32)) if SMALL else (8, 256, (64, 128, 256))
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = nn.GroupNorm(8, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = nn.GroupNorm(8, cout)
        self.skip = (
            nn.Conv2d(cin, cout, 1, stride, bias=False) if (cin != cout or stride != 1) else nn.Identity()
        )

    def forward(self, x):
        h = F.relu(self.n1(self.c1(x)))
        return F.relu(self.n2(self.c2(h)) + self.skip(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        w0, w1, w2 = WIDTHS
        self.stem = nn.Sequential(nn.Conv2d(3, w0, 3, 1, 1, bias=False), nn.GroupNorm(8, w0), nn.ReLU())
        self.body = nn.Sequential(ResBlock(w0, w0, 1), ResBlock(w0, w1, 2), ResBlock(w1, w2, 2))
        self.fc = nn.Linear(w2, 10)

    def forward(self, x):
        return self.fc(self.body(self.stem(x)).mean((2, 3)))


members = [Net().to(device) for _ in range(E)]
params, buffers = stack_module_state(members)
base = copy.deepcopy(members[0]).to("meta")
del members


def member_logits(p, b, x):
    return functional_call(base, (p, b), (x,))


ens = vmap(member_logits)
optimizer = torch.optim.AdamW(list(params.values()), lr=1e-3, weight_decay=5e-4)
x_pool = torch.randn(4 * B, 3, 32, 32, device=device)
y_pool = torch.randint(0, 10, (4 * B,), device=device)
if device == "cuda":
    print(f"ensemble {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    idx = torch.randint(0, 4 * B, (E, B), device=device)
    xb, yb = x_pool[idx], y_pool[idx]
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = ens(params, buffers, xb)
    loss = F.cross_entropy(logits.float().flatten(0, 1), yb.flatten()) * E
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item() / E:.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del idx, xb, yb, logits, loss
detached = {k: v.detach() for k, v in params.items()}
x_test = torch.randn(2 * B, 3, 32, 32, device=device)
with torch.no_grad():
    probs = vmap(member_logits, in_dims=(0, 0, None))(detached, buffers, x_test).softmax(-1).mean(0)
    entropy = -(probs * probs.clamp_min(1e-12).log()).sum(-1).mean()
if device == "cuda":
    print(
        f"entropy {entropy.item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def mean_logprob(x):
    return vmap(member_logits, in_dims=(0, 0, None))(detached, buffers, x).log_softmax(-1).mean(0)


xs = x_test[: B // 2]
_, tangent_out = jvp(mean_logprob, (xs,), (torch.randn_like(xs),))
out, pullback = vjp(mean_logprob, xs)
(saliency,) = pullback(torch.ones_like(out))
if device == "cuda":
    print(
        f"jvp {tangent_out.abs().mean().item():.3e} vjp {saliency.abs().mean().item():.3e}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del tangent_out, out, pullback, saliency
p0 = {k: v[0] for k, v in detached.items()}
b0 = {k: v[0] for k, v in buffers.items()}
xh, yh = x_pool[:B], y_pool[:B]


def loss0(p):
    return F.cross_entropy(functional_call(base, (p, b0), (xh,)), yh)


v = {k: torch.randn_like(t) for k, t in p0.items()}
_, hvp = jvp(grad(loss0), (p0,), (v,))
vhv = sum((hvp[k] * v[k]).sum() for k in v)
if device == "cuda":
    print(
        f"hvp v.Hv {vhv.item():.3e}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke vHv {vhv.item():.3e}")
