"""A deep tanh MLP regressor built from a hand-written in-place activation: a custom
torch.autograd.Function in the new style (forward without ctx, setup_context) that runs tanh_ on its
input, marks it dirty, saves its output both for backward and for forward-mode AD (save_for_forward)
and has a jvp that updates the tangent in place. Each block carries a forward pre-hook with kwargs
(with_kwargs=True, rewriting a `scale` keyword), a forward hook with kwargs that always runs, a full
backward pre-hook that clips grad_output and a full backward hook that records detached grad norms.
Trained with Rprop (foreach) and a StepLR; then forward-mode AD: under no_grad, input-direction
Jacobian columns of the whole network through fwAD.dual_level/make_dual/unpack_dual, one batch of
directions after another; finally the hooks are removed and a plain evaluation runs.

Phases: 0 model and data; 1 Rprop training with hooks; 2 forward-mode Jacobian columns; 3 hooks removed,
evaluation."""

import os

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3321)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N, D_IN, WIDTH, DEPTH, BS, STEPS, N_DIRS = 512, 32, 64, 3, 64, 3, 4
else:
    N, D_IN, WIDTH, DEPTH, BS, STEPS, N_DIRS = 65536, 256, 2048, 8, 4096, 12, 16


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class InplaceTanh(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.tanh_()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_dirty(inputs[0])
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved_tensors
        return grad_out * (1 - y * y)

    @staticmethod
    def jvp(ctx, x_t):
        (y,) = ctx.saved_tensors
        return x_t.mul_(1 - y * y)


class Block(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)
        self.norm = nn.LayerNorm(d_out)

    def forward(self, x, scale=1.0):
        h = self.norm(self.fc(x)) * scale
        return InplaceTanh.apply(h)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        dims = [D_IN] + [WIDTH] * DEPTH
        self.blocks = nn.ModuleList([Block(dims[i], dims[i + 1]) for i in range(DEPTH)])
        self.head = nn.Linear(WIDTH, 8)

    def forward(self, x):
        for b in self.blocks:
            x = b(x, scale=1.0)
        return self.head(x)


model = Net().to(device)
X = torch.randn(N, D_IN, device=device)
W_true = torch.randn(D_IN, 8, device=device) / D_IN**0.5
Y = torch.sin(X @ W_true) + 0.05 * torch.randn(N, 8, device=device)
report("model and data")

grad_norms = []
handles = []


def pre_hook(module, args, kwargs):
    kwargs = dict(kwargs)
    kwargs["scale"] = 0.9 if module.training else 1.0
    return args, kwargs


def fwd_hook(module, args, kwargs, output):
    return output


def bwd_pre_hook(module, grad_output):
    return tuple(None if g is None else g.clamp(-1.0, 1.0) for g in grad_output)


def bwd_hook(module, grad_input, grad_output):
    grad_norms.append(grad_output[0].detach().norm())


for b in model.blocks:
    handles.append(b.register_forward_pre_hook(pre_hook, with_kwargs=True))
    handles.append(b.register_forward_hook(fwd_hook, with_kwargs=True, always_call=True))
    handles.append(b.register_full_backward_pre_hook(bwd_pre_hook))
    handles.append(b.register_full_backward_hook(bwd_hook))

opt = torch.optim.Rprop(model.parameters(), lr=1e-3, etas=(0.5, 1.2), step_sizes=(1e-6, 1e-2), foreach=True)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
model.train()
for step in range(STEPS):
    idx = torch.randint(0, N, (BS,), device=device)
    xb = X[idx].requires_grad_(True)
    loss = F.smooth_l1_loss(model(xb), Y[idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
norm_hist = torch.stack(grad_norms)
report("rprop training")

model.eval()
x0 = X[:BS]
cols = []
with torch.no_grad():
    for k in range(N_DIRS):
        tangent = torch.zeros_like(x0)
        tangent[:, k] = 1.0
        with fwAD.dual_level():
            dual = fwAD.make_dual(x0, tangent)
            out = model(dual)
            cols.append(fwAD.unpack_dual(out).tangent.clone())
jac = torch.stack(cols, dim=-1)
sens = jac.abs().mean(dim=(0, 1))
report("forward-mode jacobian columns")

for h in handles:
    h.remove()
del jac, cols
with torch.no_grad():
    preds = torch.cat([model(X[i : i + BS]) for i in range(0, min(N, 8 * BS), BS)])
    mse = F.mse_loss(preds, Y[: preds.shape[0]])
print("eval mse", float(mse), "sens", sens.shape, "norms", norm_hist.shape)
report("hooks removed, evaluation")
