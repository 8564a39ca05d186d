"""A physics-informed network: a tanh MLP u(x, t) (256 wide, 6 layers) in fp32 whose loss needs u_t,
u_x and u_xx from torch.autograd.grad(create_graph=True) over 65,536 collocation points (a 1-D heat
equation residual) plus a boundary term, Adam, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2404)
N, W, DEPTH = (64, 16, 2) if SMALL else (65536, 256, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"
layers, width = [], 2
for _ in range(DEPTH):
    layers += [nn.Linear(width, W), nn.Tanh()]
    width = W
model = nn.Sequential(*layers, nn.Linear(W, 1)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    xt = torch.rand(N, 2, device=device, requires_grad=True)
    u = model(xt)
    (du,) = torch.autograd.grad(u.sum(), xt, create_graph=True)
    u_x, u_t = du[:, :1], du[:, 1:]
    (d2u,) = torch.autograd.grad(u_x.sum(), xt, create_graph=True)
    residual = u_t - 0.1 * d2u[:, :1]
    edge = torch.rand(N // 16, 2, device=device)
    edge[:, 0] = 0.0
    loss = residual.pow(2).mean() + model(edge).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
