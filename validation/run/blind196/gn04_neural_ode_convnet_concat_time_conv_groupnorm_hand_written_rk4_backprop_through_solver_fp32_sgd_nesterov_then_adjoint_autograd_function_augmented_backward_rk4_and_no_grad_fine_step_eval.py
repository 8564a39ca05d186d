"""An ODE-Net image classifier (Chen et al. 2018) on CIFAR-sized images with a fixed-step RK4 solver written
by hand, trained first by backpropagating through the solver and then with an adjoint method written as a
torch.autograd.Function.

Model: a stem conv 3 -> 64 (3x3), GroupNorm(32), ReLU, conv 64 -> 64 (4x4, stride 2, padding 1), GroupNorm,
ReLU (32 x 32 -> 16 x 16); an ODE block dz/dt = f(t, z) integrated over t in [0, 1], where f is GroupNorm,
ReLU, a ConcatConv2d (the time as an extra constant channel, 65 -> 64, 3x3), GroupNorm, ReLU, ConcatConv2d,
GroupNorm; head GroupNorm, ReLU, adaptive average pool, Linear 64 -> 10. fp32, batch 256, cross-entropy, SGD
(lr 0.1, momentum 0.9, nesterov, weight decay 5e-4).

Phases: the first step with 8 RK4 steps (32 evaluations of f, the whole solver graph kept for backward);
3 more such steps; 3 steps with the adjoint: the forward integrates under no_grad and saves only z(1),
the backward integrates the augmented state (z, a = dL/dz, dL/dtheta) from t = 1 back to 0 with the same
RK4, each evaluation recomputing f under enable_grad and taking vector-Jacobian products with
torch.autograd.grad; then an evaluation under torch.no_grad of 1,024 images with 16 RK4 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1964)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, STEPS, N_RK, EVAL_B, EVAL_RK, C = 4, 1, 2, 8, 3, 32
else:
    B, STEPS, N_RK, EVAL_B, EVAL_RK, C = 256, 3, 8, 1024, 16, 64


class ConcatConv2d(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin + 1, cout, 3, padding=1)

    def forward(self, t, x):
        tt = torch.ones_like(x[:, :1]) * t
        return self.conv(torch.cat([tt, x], 1))


class ODEFunc(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, c)
        self.conv1 = ConcatConv2d(c, c)
        self.norm2 = nn.GroupNorm(32, c)
        self.conv2 = ConcatConv2d(c, c)
        self.norm3 = nn.GroupNorm(32, c)
        self.nfe = 0

    def forward(self, t, x):
        self.nfe += 1
        out = F.relu(self.norm1(x))
        out = F.relu(self.norm2(self.conv1(t, out)))
        return self.norm3(self.conv2(t, out))


def rk4(f, z, t0, t1, n):
    h = (t1 - t0) / n
    t = t0
    for _ in range(n):
        k1 = f(t, z)
        k2 = f(t + h / 2, z + h / 2 * k1)
        k3 = f(t + h / 2, z + h / 2 * k2)
        k4 = f(t + h, z + h * k3)
        z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t + h
    return z


def rk4_states(f, state, t0, t1, n):
    h = (t1 - t0) / n
    t = t0
    for _ in range(n):
        k1 = f(t, state)
        k2 = f(t + h / 2, [s + h / 2 * k for s, k in zip(state, k1, strict=True)])
        k3 = f(t + h / 2, [s + h / 2 * k for s, k in zip(state, k2, strict=True)])
        k4 = f(t + h, [s + h * k for s, k in zip(state, k3, strict=True)])
        state = [
            s + h / 6 * (a + 2 * b + 2 * c + d) for s, a, b, c, d in zip(state, k1, k2, k3, k4, strict=True)
        ]
        t = t + h
    return state


class AdjointRK4(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z0, func, n, *params):
        with torch.no_grad():
            z1 = rk4(func, z0, 0.0, 1.0, n)
        ctx.func, ctx.n = func, n
        ctx.save_for_backward(z1, *params)
        return z1

    @staticmethod
    def backward(ctx, grad_z1):
        z1, *params = ctx.saved_tensors
        func, n = ctx.func, ctx.n

        def aug_dynamics(t, state):
            z, a = state[0], state[1]
            with torch.enable_grad():
                z = z.detach().requires_grad_(True)
                fz = func(t, z)
                vjps = torch.autograd.grad(fz, (z, *params), a, allow_unused=True)
            dparams = [
                torch.zeros_like(p) if g is None else -g for g, p in zip(vjps[1:], params, strict=True)
            ]
            return [fz.detach(), -vjps[0], *dparams]

        state = [z1, grad_z1, *(torch.zeros_like(p) for p in params)]
        state = rk4_states(aug_dynamics, state, 1.0, 0.0, n)
        return (state[1], None, None, *state[2:])


class ODENet(nn.Module):
    def __init__(self, c, n_classes=10):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, c, 3, padding=1),
            nn.GroupNorm(32, c),
            nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 4, stride=2, padding=1),
            nn.GroupNorm(32, c),
            nn.ReLU(inplace=True),
        )
        self.func = ODEFunc(c)
        self.head = nn.Sequential(
            nn.GroupNorm(32, c),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(c, n_classes),
        )
        self.adjoint = False

    def forward(self, x, n_steps):
        z = self.stem(x)
        if self.adjoint:
            z = AdjointRK4.apply(z, self.func, n_steps, *self.func.parameters())
        else:
            z = rk4(self.func, z, 0.0, 1.0, n_steps)
        return self.head(z)


model = ODENet(C).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
print(f"ODE-Net params {sum(p.numel() for p in model.parameters())}")


def train_step():
    x = torch.randn(B, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    model.func.nfe = 0
    loss = F.cross_entropy(model(x, N_RK), y)
    nfe_fwd = model.func.nfe
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item(), nfe_fwd, model.func.nfe - nfe_fwd


model.train()
loss, nf, nb = train_step()
print(f"step 0 loss {loss:.4f} nfe forward {nf} backward {nb}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(STEPS):
    loss, nf, nb = train_step()
print(f"direct backprop loss {loss:.4f}")
if device == "cuda":
    print(f"direct peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.adjoint = True
for _ in range(3):
    loss, nf, nb = train_step()
print(f"adjoint loss {loss:.4f} nfe forward {nf} backward {nb}")
if device == "cuda":
    print(f"adjoint peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    x = torch.randn(EVAL_B, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (EVAL_B,), device=device)
    logits = model(x, EVAL_RK)
    correct = (logits.argmax(1) == y).sum().item()
print(f"eval accuracy {correct / EVAL_B:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
