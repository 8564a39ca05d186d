"""A Hamiltonian neural network trained with torch.func: H(q, p) is a softplus MLP over 32
particles in 2-D (128 state dims, 1,024 wide), its symplectic vector field is
vmap(grad(H)) over the batch through functional_call, a Jacobian penalty uses vmap(jacrev) on a
slice of the batch, fitted to a synthetic spring system with Adam (4 steps of 4,096 states), then
a 100-step leapfrog rollout of 1,024 trajectories under no_grad; fp32; 3 phases."""

import os

import torch
import torch.nn as nn
from torch.func import functional_call, grad, jacrev, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9002)
P, HID, B, BJ, T = (4, 32, 64, 8, 5) if SMALL else (32, 1024, 4096, 128, 100)
D = 4 * P  # q and p, 2-D each
device = "cuda" if torch.cuda.is_available() else "cpu"
model = nn.Sequential(
    nn.Linear(D, HID),
    nn.Softplus(),
    nn.Linear(HID, HID),
    nn.Softplus(),
    nn.Linear(HID, HID),
    nn.Softplus(),
    nn.Linear(HID, 1),
).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
K = torch.randn(D // 2, D // 2, device=device)
K = K @ K.T / D + torch.eye(D // 2, device=device)


def energy(params, x):
    return functional_call(model, params, (x.unsqueeze(0),)).squeeze()


def field(params, x):
    g = grad(energy, argnums=1)(params, x)
    return torch.cat([g[D // 2 :], -g[: D // 2]])


batched_field = vmap(field, in_dims=(None, 0))
batched_jac = vmap(jacrev(field, argnums=1), in_dims=(None, 0))


def true_field(x):
    q, p = x[:, : D // 2], x[:, D // 2 :]
    return torch.cat([p, -q @ K], dim=1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    params = dict(model.named_parameters())
    x = torch.randn(B, D, device=device)
    pred = batched_field(params, x)
    jac = batched_jac(params, x[:BJ])
    loss = (pred - true_field(x)).pow(2).mean() + 1e-4 * jac.pow(2).sum((1, 2)).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda" and step in (0, 3):
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, pred, jac, loss
params = {k: v.detach() for k, v in model.named_parameters()}
x = torch.randn(1024 if not SMALL else 16, D, device=device)
traj = []
with torch.no_grad():
    for _t in range(T):
        half = x + 0.005 * batched_field(params, x)
        x = x + 0.01 * batched_field(params, half)
        traj.append(x[:, : D // 2].clone())
    traj = torch.stack(traj)
if device == "cuda":
    print(
        f"rollout {tuple(traj.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
