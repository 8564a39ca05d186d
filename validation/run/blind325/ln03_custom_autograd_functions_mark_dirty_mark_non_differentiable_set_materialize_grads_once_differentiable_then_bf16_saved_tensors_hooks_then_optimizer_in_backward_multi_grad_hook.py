"""A residual MLP language-model head trained with hand-written autograd pieces and autograd hooks:
an in-place leaky activation as a torch.autograd.Function that modifies its input and declares it with
ctx.mark_dirty (saving its output for backward); a top-1 router Function returning gated values plus the
argmax indices marked non-differentiable, with set_materialize_grads(False) so an unused output's grad
arrives as None; a fused "linear + squared-ReLU" Function whose backward is @once_differentiable.
Then the same training with torch.autograd.graph.saved_tensors_hooks packing every saved float32
activation to bfloat16 (unpacked back to float32), and finally an optimizer-in-backward loop: one Adam
per parameter stepped from register_post_accumulate_grad_hook (grads freed right after), with a
torch.autograd.graph.register_multi_grad_hook over the block outputs counting backward passes.

Phases: 0 model and data; 1 training with the custom Functions (10 steps, AdamW foreach);
2 same with bf16-packing saved_tensors_hooks (10 steps); 3 optimizer in backward (10 steps);
4 evaluation under no_grad of the routed indices histogram."""

import os

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3253)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, T, D, E, V, L = (4, 32, 64, 4, 500, 2) if SMALL else (16, 512, 1024, 8, 32000, 6)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class InplaceLeaky(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, slope):
        x.mul_(torch.where(x > 0, 1.0, slope))
        ctx.mark_dirty(x)
        ctx.slope = slope
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * torch.where(y > 0, 1.0, ctx.slope), None


class Top1Route(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        ctx.set_materialize_grads(False)
        probs = logits.softmax(-1)
        gate, idx = probs.max(-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(probs, idx)
        return gate, idx

    @staticmethod
    def backward(ctx, g_gate, g_idx):
        if g_gate is None:
            return None
        probs, idx = ctx.saved_tensors
        # d gate / d logits = p_i (onehot_i - p)
        onehot = torch.zeros_like(probs).scatter_(-1, idx.unsqueeze(-1), 1.0)
        gate = probs.gather(-1, idx.unsqueeze(-1))
        return g_gate.unsqueeze(-1) * gate * (onehot - probs)


class LinearSquaredReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        pre = torch.addmm(b, x, w.t())
        ctx.save_for_backward(x, w, pre)
        return torch.relu(pre).square()

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, w, pre = ctx.saved_tensors
        gpre = g * 2 * torch.relu(pre)
        return gpre @ w, gpre.t() @ x, gpre.sum(0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.router = nn.Linear(D, E)
        self.experts = nn.Parameter(torch.randn(E, D) * 0.02)
        self.up = nn.Linear(D, 4 * D)
        self.down = nn.Linear(4 * D, D)

    def forward(self, x):
        h = self.norm(x).reshape(-1, D)
        gate, idx = Top1Route.apply(self.router(h))
        h = h + gate.unsqueeze(-1) * self.experts[idx]
        h = LinearSquaredReLU.apply(h, self.up.weight, self.up.bias)
        h = InplaceLeaky.apply(self.down(h), 0.05)
        return x + h.view_as(x), idx


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, tok):
        x = self.emb(tok)
        outs, routes = [], []
        for blk in self.blocks:
            x, idx = blk(x)
            outs.append(x)
            routes.append(idx)
        return self.head(x), outs, routes


model = Model().to(device)
tokens = torch.randint(0, V, (B, T + 1), device=device)
report("setup")


def step_loss():
    logits, outs, routes = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, V), tokens[:, 1:].reshape(-1)), outs, routes


# 1: training with the custom Functions
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
for _ in range(10):
    opt.zero_grad(set_to_none=True)
    loss, _, _ = step_loss()
    loss.backward()
    opt.step()
print(f"custom-function loss {loss.item():.4f}")
report("custom_functions")


# 2: saved activations packed to bf16
def pack(t):
    if t.dtype == torch.float32 and t.numel() >= 4096:
        return ("bf16", t.to(torch.bfloat16))
    return ("raw", t)


def unpack(packed):
    kind, t = packed
    return t.float() if kind == "bf16" else t


for _ in range(10):
    opt.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss, _, _ = step_loss()
    loss.backward()
    opt.step()
print(f"bf16-packed loss {loss.item():.4f}")
del opt
report("packed_hooks")

# 3: optimizer in backward: one Adam per parameter, stepped as its grad is accumulated
per_param = {p: torch.optim.Adam([p], lr=3e-4, foreach=False) for p in model.parameters()}


def step_now(p):
    per_param[p].step()
    per_param[p].zero_grad(set_to_none=True)


handles = [p.register_post_accumulate_grad_hook(step_now) for p in model.parameters()]
backward_passes = [0]
for _ in range(10):
    loss, outs, _ = step_loss()

    def count(grads):
        backward_passes[0] += 1

    mh = torch.autograd.graph.register_multi_grad_hook(outs, count, mode="all")
    loss.backward()
    mh.remove()
    del outs
for h in handles:
    h.remove()
print(f"optimizer-in-backward loss {loss.item():.4f} after {backward_passes[0]} passes")
per_param.clear()
report("optimizer_in_backward")

# 4: evaluation: routing histogram
with torch.no_grad():
    _, _, routes = model(tokens[:, :-1])
    hist = torch.stack([torch.bincount(r, minlength=E) for r in routes])
print("routes per expert (block 0):", hist[0].tolist())
report("eval")
