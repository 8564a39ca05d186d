"""Hamiltonian neural networks (Greydanus et al. 2019) and Lagrangian neural networks (Cranmer et al. 2020)
written with torch.func, for a chain of 8 coupled oscillators and a double pendulum.

HNN: a scalar MLP H(q, p) (16 -> 512 -> 512 -> 512 -> 1, softplus), fp32. The vector field is
(dH/dp, -dH/dq), with dH/dx from torch.func.vmap(torch.func.grad(H)) over a batch of 65,536 phase-space
states; the loss is the MSE against target time derivatives; Adam (lr 1e-3). Phases: the first step; 10
more steps; a rollout of 4,096 initial states for 50 RK4 steps of the learned field under torch.no_grad
(torch.func.grad still differentiates inside), the trajectory kept on the device and moved to the host.

LNN: a scalar MLP L(q, qdot) (4 -> 500 -> 500 -> 500 -> 1, softplus) in fp64 for a double pendulum; per
state the accelerations qddot = pinv(d2L/dqdot2) (dL/dq - d2L/dq dqdot qdot) with the gradient from
torch.func.jacrev and the full 4 x 4 Hessian from torch.func.hessian (jacfwd over jacrev), both under
torch.func.vmap over 8,192 states; torch.linalg.pinv of the batched 2 x 2 blocks; MSE against target
accelerations, AdamW (lr 1e-3, weight decay 1e-4). Phase: 3 LNN steps; then the LNN's energy
E = qdot . dL/dqdot - L on 16,384 states under torch.no_grad. 5 phases."""

import os

import torch
import torch.nn as nn
from torch.func import grad, hessian, jacrev, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1965)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, STEPS, ROLL_B, ROLL_T, LNN_B, E_B, W = 64, 1, 16, 3, 32, 64, 32
else:
    B, STEPS, ROLL_B, ROLL_T, LNN_B, E_B, W = 65536, 10, 4096, 50, 8192, 16384, 512
DOF = 8


def scalar_mlp(n_in, width, depth=3):
    layers, d = [], n_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.Softplus()]
        d = width
    layers.append(nn.Linear(d, 1))
    return nn.Sequential(*layers)


hnn = scalar_mlp(2 * DOF, W).to(device)
opt = torch.optim.Adam(hnn.parameters(), lr=1e-3)
print(f"HNN params {sum(p.numel() for p in hnn.parameters())}")


def H(x):
    return hnn(x).squeeze(-1)


def field(x):
    dh = vmap(grad(H))(x)
    dq, dp = dh[:, :DOF], dh[:, DOF:]
    return torch.cat([dp, -dq], dim=1)


def hnn_step():
    x = torch.randn(B, 2 * DOF, device=device)
    target = torch.randn(B, 2 * DOF, device=device)
    loss = (field(x) - target).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


print(f"hnn step 0 loss {hnn_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(STEPS):
    loss = hnn_step()
print(f"hnn step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"hnn peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

dt = 0.05
with torch.no_grad():
    x = torch.randn(ROLL_B, 2 * DOF, device=device)
    traj = [x]
    for _ in range(ROLL_T):
        k1 = field(x)
        k2 = field(x + dt / 2 * k1)
        k3 = field(x + dt / 2 * k2)
        k4 = field(x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        traj.append(x)
    traj = torch.stack(traj, 1)
    energy = H(traj.reshape(-1, 2 * DOF)).reshape(ROLL_B, -1)
    drift = (energy[:, -1] - energy[:, 0]).abs().mean().item()
traj_host = traj.cpu()
print(f"rollout {tuple(traj_host.shape)} energy drift {drift:.5f}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

opt = traj = energy = None
lnn = scalar_mlp(4, 500 if not SMALL else W).to(device, torch.float64)
lnn_opt = torch.optim.AdamW(lnn.parameters(), lr=1e-3, weight_decay=1e-4)


def L(s):
    return lnn(s).squeeze(-1)


def accel(s):
    qdot = s[2:]
    g = jacrev(L)(s)
    h = hessian(L)(s)
    m = h[2:, 2:]
    c = h[2:, :2]
    rhs = g[:2] - c @ qdot
    return torch.linalg.pinv(m) @ rhs


for step in range(3):
    s = torch.randn(LNN_B, 4, device=device, dtype=torch.float64)
    target = torch.randn(LNN_B, 2, device=device, dtype=torch.float64)
    loss = (vmap(accel)(s) - target).pow(2).mean()
    lnn_opt.zero_grad(set_to_none=True)
    loss.backward()
    lnn_opt.step()
    print(f"lnn step {step} loss {loss.item():.5f}")
if device == "cuda":
    print(f"lnn peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def energy_fn(s):
    dl = jacrev(L)(s)
    return (s[2:] * dl[2:]).sum() - L(s)


with torch.no_grad():
    s = torch.randn(E_B, 4, device=device, dtype=torch.float64)
    e = vmap(energy_fn)(s)
print(f"lnn energy mean {e.mean().item():.5f}")
if device == "cuda":
    print(f"energy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
