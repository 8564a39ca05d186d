"""Differentiable MLS-MPM soft-robot locomotion in plain PyTorch, the way ports of difftaichi's
`diffmpm.py` write it (Hu et al., ICLR 2020): 8 independent soft robots (8,192 particles each, 4
column actuators driven by an open-loop controller of 4 sine waves per actuator) on a 128 x 128 grid
each, all batched. Every substep is the MLS-MPM cycle by hand: particle-to-grid with quadratic
B-spline weights over the 3 x 3 stencil (all 9 offsets at once: (B, N, 9) weights, (B, N, 9, 2)
momenta, one `index_add` of the flattened (B*128*128) grid for momentum and one for mass), the
deformation gradient updated as (I + dt C) F, a 2-D polar decomposition by hand (atan2, cos, sin) for
the fixed-corotated Cauchy stress plus the actuation stress F A F^T, the grid update (momentum over
mass, gravity, the separate/sticky boundary conditions as `torch.where` over precomputed index masks),
then grid-to-particle by gathering the 9 stencil nodes back (`grid[idx]`) for the new velocity and
the APIC affine matrix C. The loss is minus the mean final x of each robot. fp32 throughout.
Phase 1: 2 iterations of plain gradient descent (difftaichi's `w -= lr * w.grad`, by hand under
no_grad) with backpropagation through all 128 substeps (the whole tape held). Phase 2: 1 iteration
over 256 substeps with `torch.utils.checkpoint` (non-reentrant) around every 32-substep segment, only
the segment boundaries kept. Phase 3: a no_grad rollout of 256 substeps of the trained controllers.
Seeded, fixed sizes. 3 phases + end."""

import math

import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2792)
dev = "cuda"

B, G, NX, NY = 8, 128, 128, 64
N = NX * NY
dx = 1.0 / G
inv_dx = float(G)
dt = 1e-3
p_vol, p_mass = 1.0, 1.0
E = 10.0
mu, la = E, E
act_strength = 4.0
bound, coeff = 3, 0.5
gravity = 3.8
N_ACT, N_SIN = 4, 4
omega = 2 * math.pi * 4.0


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# robot particles: a block of NX x NY particles at half-cell spacing, actuators by column quarters
ii, jj = torch.meshgrid(torch.arange(NX), torch.arange(NY), indexing="ij")
x0 = torch.stack([0.1 + (ii.flatten() + 0.5) * dx * 0.5, 0.03 + (jj.flatten() + 0.5) * dx * 0.5], dim=-1)
x0 = x0.to(dev).expand(B, N, 2).contiguous()
act_id = (ii.flatten() * N_ACT // NX).to(dev)  # (N,)

# the 3 x 3 stencil
OFF = torch.tensor([(i, j) for i in range(3) for j in range(3)], device=dev, dtype=torch.float32)  # (9, 2)
OFF_I = torch.tensor([i for i in range(3) for _ in range(3)], device=dev)
OFF_J = torch.tensor([j for _ in range(3) for j in range(3)], device=dev)
batch_base = (torch.arange(B, device=dev) * G * G).view(B, 1, 1)
gi, gj = torch.meshgrid(torch.arange(G, device=dev), torch.arange(G, device=dev), indexing="ij")
left_wall, right_wall = (gi < bound), (gi > G - bound)
floor, ceiling = (gj < bound), (gj > G - bound)
I2 = torch.eye(2, device=dev)


def controller(weights, bias, t):
    phase = omega * t * dt + 2 * math.pi / N_SIN * torch.arange(N_SIN, device=dev)
    return torch.tanh((weights * torch.sin(phase)).sum(-1) + bias)  # (B, N_ACT)


def substep(x, v, C, F, act):
    base = (x * inv_dx - 0.5).floor()
    fx = x * inv_dx - base  # (B, N, 2)
    w = torch.stack(
        [0.5 * (1.5 - fx) ** 2, 0.75 - (fx - 1) ** 2, 0.5 * (fx - 0.5) ** 2], dim=2
    )  # (B, N, 3, 2)
    new_F = (I2 + dt * C) @ F  # (B, N, 2, 2)
    f00, f01, f10, f11 = new_F[..., 0, 0], new_F[..., 0, 1], new_F[..., 1, 0], new_F[..., 1, 1]
    J = f00 * f11 - f01 * f10
    theta = torch.atan2(f10 - f01, f00 + f11)
    c, s = torch.cos(theta), torch.sin(theta)
    r = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    a = act[:, act_id] * act_strength  # (B, N)
    zero = torch.zeros_like(a)
    A = torch.stack([zero, zero, zero, a], -1).view(B, N, 2, 2)
    cauchy = 2 * mu * (new_F - r) @ new_F.transpose(-1, -2) + I2 * (la * J * (J - 1))[..., None, None]
    cauchy = cauchy + new_F @ A @ new_F.transpose(-1, -2)
    stress = -(dt * p_vol * 4 * inv_dx * inv_dx) * cauchy
    affine = stress + p_mass * C
    wgt = w[:, :, OFF_I, 0] * w[:, :, OFF_J, 1]  # (B, N, 9)
    dpos = (OFF - fx[:, :, None, :]) * dx  # (B, N, 9, 2)
    node = base[:, :, None, :].long() + OFF.long()  # (B, N, 9, 2)
    idx = (batch_base + node[..., 0] * G + node[..., 1]).view(-1)
    mom = wgt[..., None] * (p_mass * v[:, :, None, :] + (affine[:, :, None] @ dpos[..., None]).squeeze(-1))
    grid_v = torch.zeros(B * G * G, 2, device=dev).index_add(0, idx, mom.view(-1, 2))
    grid_m = torch.zeros(B * G * G, device=dev).index_add(0, idx, (wgt * p_mass).view(-1))
    # grid operations
    gv = grid_v / (grid_m[:, None] + 1e-10)
    gv = gv.view(B, G, G, 2)
    vx, vy = gv[..., 0], gv[..., 1] - dt * gravity
    vx = torch.where((left_wall & (vx < 0)) | (right_wall & (vx > 0)), 0.0, vx)
    on_floor = floor & (vy < 0)
    vx = torch.where(on_floor, vx * coeff, vx)
    vy = torch.where(on_floor | (ceiling & (vy > 0)), 0.0, vy)
    gv = torch.stack([vx, vy], -1).view(B * G * G, 2)
    # grid to particles
    g = gv[idx].view(B, N, 9, 2)
    new_v = (wgt[..., None] * g).sum(2)
    new_C = 4 * inv_dx * (wgt[..., None, None] * g[..., :, None] * dpos[..., None, :]).sum(2)
    return x + dt * new_v, new_v, new_C, new_F


def segment(x, v, C, F, weights, bias, t0, steps):
    for t in range(t0, t0 + steps):
        x, v, C, F = substep(x, v, C, F, controller(weights, bias, t))
    return x, v, C, F


def init_state():
    return (
        x0.clone(),
        torch.zeros(B, N, 2, device=dev),
        torch.zeros(B, N, 2, 2, device=dev),
        I2.expand(B, N, 2, 2).clone(),
    )


weights = (torch.randn(B, N_ACT, N_SIN, device=dev) * 0.01).requires_grad_()
bias = torch.zeros(B, N_ACT, device=dev, requires_grad=True)
lr = 0.1
report("setup")

for it in range(2):
    x, v, C, F = segment(*init_state(), weights, bias, 0, 128)
    loss = -x[..., 0].mean(1).sum()
    loss.backward()
    with torch.no_grad():
        weights -= lr * weights.grad
        bias -= lr * bias.grad
    weights.grad = None
    bias.grad = None
    print(f"iter {it} loss {loss.item():.5f}")
    del x, v, C, F, loss
report("bptt")

SEG = 32
for it in range(1):
    state = init_state()
    for s in range(256 // SEG):
        state = checkpoint(segment, *state, weights, bias, s * SEG, SEG, use_reentrant=False)
    loss = -state[0][..., 0].mean(1).sum()
    loss.backward()
    with torch.no_grad():
        weights -= lr * weights.grad
        bias -= lr * bias.grad
    weights.grad = None
    bias.grad = None
    print(f"ckpt iter {it} loss {loss.item():.5f}")
    del state, loss
report("checkpointed")

with torch.no_grad():
    x, v, C, F = segment(*init_state(), weights, bias, 0, 256)
    print("rollout mean x", [round(float(t), 4) for t in x[..., 0].mean(1)[:4]])
report("rollout")
print("done")
