"""A physics-informed network for the 2-D Helmholtz equation u_xx + u_yy + k^2 u = f on the unit
square (the manufactured solution sin(a1 pi x) sin(a2 pi y)), float64 throughout: random Fourier
features (sin, cos), a 5-layer tanh MLP of width 256, the Laplacian from autograd.grad twice with
create_graph=True, a boundary loss on 2,048 points; 2 Adam steps (ExponentialLR) on 16,384 points,
residual-based refinement (65,536 candidates' residuals in chunks without create_graph, the 4,096
largest by topk join the set), one Adam step on the 20,480 points, then the residual and error on
a 256 x 256 grid in chunks; 6 phases."""

import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11303)
NI, NB, NCAND, NADD, GRID, CHUNK = (
    (256, 64, 1024, 64, 16, 128) if SMALL else (16384, 2048, 65536, 4096, 256, 16384)
)
K, A1, A2, W, NFF = 4.0, 1.0, 4.0, 256, 128
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.set_default_dtype(torch.float64)


class FourierPINN(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("B", torch.randn(2, NFF) * 2.0)
        layers = [nn.Linear(2 * NFF, W), nn.Tanh()]
        for _ in range(4):
            layers += [nn.Linear(W, W), nn.Tanh()]
        layers.append(nn.Linear(W, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, xy):
        proj = 2 * math.pi * xy @ self.B
        return self.net(torch.cat([proj.sin(), proj.cos()], -1))


def exact(xy):
    return torch.sin(A1 * math.pi * xy[:, :1]) * torch.sin(A2 * math.pi * xy[:, 1:])


def forcing(xy):
    return (K**2 - (A1 * math.pi) ** 2 - (A2 * math.pi) ** 2) * exact(xy)


def residual(model, xy, create_graph=True):
    xy = xy.requires_grad_(True)
    u = model(xy)
    du = torch.autograd.grad(u.sum(), xy, create_graph=True)[0]
    u_xx = torch.autograd.grad(du[:, 0].sum(), xy, create_graph=create_graph, retain_graph=True)[0][:, 0]
    u_yy = torch.autograd.grad(du[:, 1].sum(), xy, create_graph=create_graph)[0][:, 1]
    return u_xx + u_yy + K**2 * u.squeeze(-1) - forcing(xy).squeeze(-1), u


def boundary_points(n):
    t = torch.rand(n, device=device)
    side = torch.randint(0, 4, (n,), device=device)
    x = torch.where(side < 2, t, (side == 3).double())
    y = torch.where(side < 2, (side == 1).double(), t)
    return torch.stack([x, y], -1)


model = FourierPINN().to(device)
xy_in = torch.rand(NI, 2, device=device)
xy_bd = boundary_points(NB)


def loss_fn():
    r, _ = residual(model, xy_in.detach().clone())
    return r.square().mean() + 100.0 * (model(xy_bd) - exact(xy_bd)).square().mean()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)


def train_step(tag):
    loss = loss_fn()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(f"{tag} points {xy_in.size(0)} loss {loss.item():.4e} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()


train_step("adam0")
train_step("adam1")
# residual-based adaptive refinement: the candidates with the largest residuals join the collocation set
cand = torch.rand(NCAND, 2, device=device)
scores = torch.cat(
    [residual(model, part.clone(), create_graph=False)[0].detach().abs() for part in cand.split(CHUNK)]
)
xy_in = torch.cat([xy_in, cand[scores.topk(NADD).indices]])
del cand, scores
if device == "cuda":
    print(
        f"refine points {xy_in.size(0)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
train_step("adam2")
g = torch.linspace(0, 1, GRID, device=device)
grid = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
res_sq, err_sq = 0.0, 0.0
for part in grid.split(CHUNK):
    r, u = residual(model, part.clone(), create_graph=False)
    res_sq += r.detach().square().sum()
    err_sq += (u.detach() - exact(part)).square().sum()
    del r, u
if device == "cuda":
    print(
        f"grid residual {(res_sq / grid.size(0)).sqrt().item():.3e}"
        f" error {(err_sq / grid.size(0)).sqrt().item():.3e}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
