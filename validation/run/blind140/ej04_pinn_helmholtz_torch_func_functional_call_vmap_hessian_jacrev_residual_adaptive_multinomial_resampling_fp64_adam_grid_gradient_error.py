"""A physics-informed network for the 2-D Helmholtz equation (the benchmark of Wang, Teng and
Perdikaris's gradient-pathology paper, written with torch.func as in the functorch PINN
tutorials): u(x, y) = sin(pi x) sin(4 pi y) on [-1, 1]^2, an MLP of 4 tanh layers of 512 in
float64 called through `functional_call` on the module's own parameters, the Laplacian of every
collocation point by `vmap(hessian(u, argnums=1))` (jacfwd over jacrev) and the PDE residual
against the forcing term, the boundary loss on 4 x 2,048 edge points, the residual loss on
32,768 Sobol-free uniform points; Adam, 4 steps, with residual-based adaptive refinement after
the second: the residual of 65,536 candidates under no_grad (the transforms still differentiate
inside it), 8,192 new points drawn by `multinomial` over the squared residuals without
replacement and concatenated; then the evaluation on a 512 x 512 grid in chunks of 65,536: the
relative L2 error of u and of its gradient by `vmap(jacrev(u, argnums=1))`; 6 phases."""

import math
import os

import torch
import torch.nn as nn
from torch.func import functional_call, hessian, jacrev, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14004)
WIDTH, DEPTH = (32, 2) if SMALL else (512, 4)
N_COL, N_BC, N_CAND, N_ADD, GRID, CHUNK = (256, 32, 512, 64, 32, 256) if SMALL else (
    32768, 2048, 65536, 8192, 512, 65536)
STEPS = 4
A1, A2, KAPPA = 1.0, 4.0, 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float64


class MLP(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        layers, d = [], 2
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.Tanh()]
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)
        for m in self.net:
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, xy):
        return self.net(xy)


def exact(xy):
    return torch.sin(A1 * math.pi * xy[..., 0]) * torch.sin(A2 * math.pi * xy[..., 1])


def forcing(xy):
    lap = -((A1 * math.pi) ** 2 + (A2 * math.pi) ** 2) * exact(xy)
    return lap + KAPPA**2 * exact(xy)


model = MLP(WIDTH, DEPTH).to(device, dtype)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def u_point(params, xy):
    return functional_call(model, params, (xy.unsqueeze(0),)).squeeze()


lap_fn = vmap(lambda p, xy: torch.diagonal(hessian(u_point, argnums=1)(p, xy)).sum(), in_dims=(None, 0))
grad_fn = vmap(jacrev(u_point, argnums=1), in_dims=(None, 0))


def residual(params, xy):
    u = functional_call(model, params, (xy,)).squeeze(-1)
    return lap_fn(params, xy) + KAPPA**2 * u - forcing(xy)


def boundary(n):
    t = torch.rand(n, device=device, dtype=dtype) * 2 - 1
    one = torch.ones(n, device=device, dtype=dtype)
    return torch.cat([torch.stack(e, dim=1) for e in ((t, one), (t, -one), (one, t), (-one, t))])


col = torch.rand(N_COL, 2, device=device, dtype=dtype) * 2 - 1
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS):
    params = dict(model.named_parameters())
    bc = boundary(N_BC)
    loss_r = residual(params, col).pow(2).mean()
    loss_b = (functional_call(model, params, (bc,)).squeeze(-1) - exact(bc)).pow(2).mean()
    loss = loss_r + 10.0 * loss_b
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step == 1:
        with torch.no_grad():
            cand = torch.rand(N_CAND, 2, device=device, dtype=dtype) * 2 - 1
            r2 = residual({k: v.detach() for k, v in model.named_parameters()}, cand).pow(2)
            pick = torch.multinomial(r2 / r2.sum(), N_ADD, replacement=False)
            col = torch.cat([col, cand[pick]])
            del cand, r2, pick
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4e} points {col.shape[0]}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, loss_r, loss_b
params = {k: v.detach() for k, v in model.named_parameters()}
g = torch.linspace(-1, 1, GRID, device=device, dtype=dtype)
grid = torch.stack(torch.meshgrid(g, g, indexing="ij"), dim=-1).reshape(-1, 2)
err_u = err_g = norm_u = norm_g = torch.zeros((), device=device, dtype=dtype)
with torch.no_grad():
    for s in range(0, grid.shape[0], CHUNK):
        xy = grid[s : s + CHUNK]
        u = functional_call(model, params, (xy,)).squeeze(-1)
        du = grad_fn(params, xy)
        ue = exact(xy)
        due = torch.stack(
            [
                A1 * math.pi * torch.cos(A1 * math.pi * xy[:, 0]) * torch.sin(A2 * math.pi * xy[:, 1]),
                A2 * math.pi * torch.sin(A1 * math.pi * xy[:, 0]) * torch.cos(A2 * math.pi * xy[:, 1]),
            ],
            dim=1,
        )
        err_u = err_u + (u - ue).pow(2).sum()
        norm_u = norm_u + ue.pow(2).sum()
        err_g = err_g + (du - due).pow(2).sum()
        norm_g = norm_g + due.pow(2).sum()
if device == "cuda":
    print(
        f"rel l2 u {(err_u / norm_u).sqrt().item():.4f} grad {(err_g / norm_g).sqrt().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
