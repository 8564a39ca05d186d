"""A physics-informed network for the 1-D viscous Burgers equation u_t + u u_x = nu u_xx on
[-1, 1] x [0, 1]: an 8-layer tanh MLP of width 128 from (x, t) to u, the residual's first and second
derivatives taken with torch.autograd.grad(create_graph=True) at 131,072 random collocation points,
plus initial (u = -sin(pi x)) and boundary (u = 0) losses; 3 Adam steps, then L-BFGS (strong Wolfe
line search, 10 iterations, history 50) over a closure that rebuilds the whole graph, fp32; then the
solution evaluated on a 512 x 256 grid in chunks under no_grad; 4 phases."""

import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11202)
N, NB, WIDTH, DEPTH, ITERS = (1024, 128, 32, 3, 3) if SMALL else (131072, 4096, 128, 8, 10)
NU = 0.01 / math.pi
device = "cuda" if torch.cuda.is_available() else "cpu"

layers = [nn.Linear(2, WIDTH), nn.Tanh()]
for _ in range(DEPTH - 1):
    layers += [nn.Linear(WIDTH, WIDTH), nn.Tanh()]
net = nn.Sequential(*layers, nn.Linear(WIDTH, 1)).to(device)

xc = (torch.rand(N, 1, device=device) * 2 - 1).requires_grad_()
tc = torch.rand(N, 1, device=device).requires_grad_()
x0 = torch.rand(NB, 1, device=device) * 2 - 1
xb = torch.cat([-torch.ones(NB // 2, 1), torch.ones(NB // 2, 1)]).to(device)
tb = torch.rand(NB, 1, device=device)


def loss_fn():
    u = net(torch.cat([xc, tc], 1))
    u_x, u_t = torch.autograd.grad(u.sum(), (xc, tc), create_graph=True)
    u_xx = torch.autograd.grad(u_x.sum(), xc, create_graph=True)[0]
    res = u_t + u * u_x - NU * u_xx
    u0 = net(torch.cat([x0, torch.zeros_like(x0)], 1))
    ub = net(torch.cat([xb, tb], 1))
    return res.pow(2).mean() + (u0 + torch.sin(math.pi * x0)).pow(2).mean() + ub.pow(2).mean()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
adam = torch.optim.Adam(net.parameters(), lr=1e-3)
for _ in range(3):
    adam.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    adam.step()
if device == "cuda":
    print(f"adam loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
del loss, adam
lbfgs = torch.optim.LBFGS(
    net.parameters(), lr=1.0, max_iter=ITERS, history_size=50, line_search_fn="strong_wolfe"
)


def closure():
    lbfgs.zero_grad()
    loss = loss_fn()
    loss.backward()
    return loss


loss = lbfgs.step(closure)
if device == "cuda":
    print(f"lbfgs loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    gx, gt = torch.meshgrid(
        torch.linspace(-1, 1, 512, device=device), torch.linspace(0, 1, 256, device=device), indexing="ij"
    )
    grid = torch.stack([gx.flatten(), gt.flatten()], 1)
    u = torch.cat([net(chunk) for chunk in grid.split(32768)]).view(512, 256)
if device == "cuda":
    print(
        f"eval {tuple(u.shape)} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
