"""A neural ODE fitted to Lorenz-96 (K = 40 variables, forcing F = 8) trajectories with the continuous
adjoint method written by hand (Chen et al. 2018, Appendix B): a `torch.autograd.Function` whose forward
integrates dz/dt = f_theta(z) with fixed-step RK4 under no_grad and saves only the final state, and whose
backward integrates the augmented system [z, a, a_theta] backwards in time with RK4, each evaluation of the
augmented dynamics re-running f under `torch.enable_grad()` on a detached state and taking
`torch.autograd.grad(f, (z, *params), -a)` (vector-Jacobian products, `allow_unused=False`). The model is
an MLP (40 -> 512 -> 512 -> 40, SiLU) with TF32 matmuls allowed (`torch.backends.cuda.matmul.allow_tf32`).
Data: the true Lorenz-96 system integrated in float64 with RK4 (periodic neighbours via `torch.roll`) and
cast to float32.

Phases: 0 data (float64 burn-in and 16 observation intervals for 4096 initial states); 1 model, Adam and
the first adjoint training step (4 observation intervals of 8 RK4 steps, each interval an adjoint
Function call); 2 two more adjoint steps; 3 the same loss by direct backpropagation through the RK4 graph
(the memory the adjoint avoids); 4 the model in float64 (`.double()`) rolling out 256 steps under no_grad."""

import torch
from torch import nn

torch.manual_seed(3342)
dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True
K, FORCING, DT, SUB = 40, 8.0, 0.01, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def lorenz96(x):
    return (torch.roll(x, -1, -1) - torch.roll(x, 2, -1)) * torch.roll(x, 1, -1) - x + FORCING


def rk4(f, z, h):
    k1 = f(z)
    k2 = f(z + 0.5 * h * k1)
    k3 = f(z + 0.5 * h * k2)
    k4 = f(z + h * k3)
    return z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


class Dynamics(nn.Module):
    def __init__(self, width=512):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(K, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(), nn.Linear(width, K)
        )

    def forward(self, z):
        return self.net(z)


class AdjointODE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z0, func, steps, *params):
        with torch.no_grad():
            z = z0
            for _ in range(steps):
                z = rk4(func, z, DT)
        ctx.func, ctx.steps = func, steps
        ctx.save_for_backward(z, *params)
        return z

    @staticmethod
    def backward(ctx, grad_z):
        z1, *params = ctx.saved_tensors
        func, n = ctx.func, len(params)

        def augmented(state):
            z, a = state[0], state[1]
            with torch.enable_grad():
                z = z.detach().requires_grad_(True)
                fz = func(z)
                vjps = torch.autograd.grad(fz, (z, *params), -a)
            # time runs backwards: negate every component
            return [-fz.detach(), -vjps[0]] + [-g for g in vjps[1:]]

        state = [z1, grad_z] + [torch.zeros_like(p) for p in params]
        for _ in range(ctx.steps):
            k1 = augmented(state)
            k2 = augmented([s + 0.5 * DT * k for s, k in zip(state, k1, strict=True)])
            k3 = augmented([s + 0.5 * DT * k for s, k in zip(state, k2, strict=True)])
            k4 = augmented([s + DT * k for s, k in zip(state, k3, strict=True)])
            state = [
                s + DT / 6 * (a + 2 * b + 2 * c + d)
                for s, a, b, c, d in zip(state, k1, k2, k3, k4, strict=True)
            ]
        return (state[1], None, None, *state[2 : 2 + n])


with torch.no_grad():
    x = FORCING + 0.01 * torch.randn(4096, K, dtype=torch.float64, device=dev)
    for _ in range(500):
        x = rk4(lorenz96, x, DT)
    obs = [x]
    for _ in range(16):
        for _ in range(SUB):
            x = rk4(lorenz96, x, DT)
        obs.append(x)
    data = torch.stack(obs, 1).float()  # (4096, 17, 40)
    mean, std = data.mean((0, 1)), data.std((0, 1))
    del obs, x
print(f"data {tuple(data.shape)} std {std.mean().item():.3f}")
report("data")

model = Dynamics().to(dev)
params = tuple(model.parameters())
opt = torch.optim.Adam(params, lr=3e-4)


def adjoint_loss(start, batch):
    traj = data[batch]
    z = traj[:, start]
    loss = 0.0
    for i in range(1, 5):
        z = AdjointODE.apply(z, model, SUB, *params)
        loss = loss + (z - traj[:, start + i]).pow(2).mean()
    return loss / 4


batches = torch.randperm(4096, device=dev).view(4, 1024)
loss = adjoint_loss(0, batches[0])
opt.zero_grad(set_to_none=True)
loss.backward()
opt.step()
print(f"adjoint step 0 loss {loss.item():.4f}")
del loss
report("adjoint_first")

for s in (1, 2):
    loss = adjoint_loss(4 * s, batches[s])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"adjoint step {s} loss {loss.item():.4f}")
    del loss
report("adjoint_steps")

traj = data[batches[3]]
z = traj[:, 0]
loss = 0.0
for i in range(1, 5):
    for _ in range(SUB):
        z = rk4(model, z, DT)
    loss = loss + (z - traj[:, i]).pow(2).mean()
loss = loss / 4
opt.zero_grad(set_to_none=True)
loss.backward()
opt.step()
print(f"direct backprop loss {loss.item():.4f}")
del loss, z, traj
report("direct_backprop")

model64 = model.double()
opt.zero_grad(set_to_none=True)
del opt
with torch.no_grad():
    z = data[:, -1].double()
    energy = []
    for t in range(256):
        z = rk4(model64, z, DT)
        if t % 32 == 31:
            energy.append(z.pow(2).mean())
    energy = torch.stack(energy).cpu()
print(f"rollout energy {energy.tolist()[-1]:.3f}")
report("fp64_rollout")
