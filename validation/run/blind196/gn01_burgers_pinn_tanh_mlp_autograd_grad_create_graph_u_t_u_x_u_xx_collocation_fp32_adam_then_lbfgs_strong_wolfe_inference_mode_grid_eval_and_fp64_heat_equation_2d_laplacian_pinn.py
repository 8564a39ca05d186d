"""A physics-informed neural network (Raissi et al. 2019) for the viscous Burgers equation
u_t + u u_x - (0.01 / pi) u_xx = 0 on x in [-1, 1], t in [0, 1], then a 2-D heat-equation PINN in fp64.

Burgers: an MLP (x, t) -> u of 8 hidden tanh layers of width 128 (Xavier-normal init), fp32. The loss is
the mean squared PDE residual at 100,000 random collocation points (u_t, u_x from torch.autograd.grad
with create_graph=True, u_xx from a second grad of u_x) plus the initial condition u(x, 0) = -sin(pi x)
at 2,048 points and the Dirichlet boundary u(+-1, t) = 0 at 2,048 points. Collocation points are drawn
once on the device. Adam (lr 1e-3).

Phases: the first Adam step; 20 more Adam steps; L-BFGS fine-tuning (one optimizer.step with
max_iter=20, history_size=50, strong-Wolfe line search, a closure re-evaluating the full loss); the
evaluation of u on a 512 x 201 (x, t) grid under torch.inference_mode plus the residual on 50,000 test
points (first derivatives with create_graph, u_xx without); then a heat-equation PINN in fp64
(u_t = 0.1 (u_xx + u_yy) + f on the unit square, an MLP (x, y, t) -> u of 6 SiLU layers of width 160)
trained 5 Adam steps on 60,000 points with the Laplacian from two nested grads per coordinate. 5 phases."""

import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1961)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N_F, N_B, ADAM_STEPS, LBFGS_ITERS, GRID_X, GRID_T, N_TEST, N_HEAT = 512, 64, 2, 3, 32, 11, 256, 256
else:
    N_F, N_B, ADAM_STEPS, LBFGS_ITERS, GRID_X, GRID_T, N_TEST, N_HEAT = (
        100_000,
        2048,
        20,
        20,
        512,
        201,
        50_000,
        60_000,
    )
NU = 0.01 / math.pi


class MLP(nn.Module):
    def __init__(self, n_in, width, depth, n_out, act=nn.Tanh):
        super().__init__()
        layers = [nn.Linear(n_in, width), act()]
        for _ in range(depth - 1):
            layers += [nn.Linear(width, width), act()]
        layers.append(nn.Linear(width, n_out))
        self.net = nn.Sequential(*layers)
        for m in self.net:
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, *coords):
        return self.net(torch.cat(coords, dim=1))


def d(y, x, create_graph=True):
    return torch.autograd.grad(y, x, grad_outputs=torch.ones_like(y), create_graph=create_graph)[0]


model = MLP(2, 128, 8, 1).to(device)
print(f"burgers PINN params {sum(p.numel() for p in model.parameters())}")

x_f = (torch.rand(N_F, 1, device=device) * 2 - 1).requires_grad_(True)
t_f = torch.rand(N_F, 1, device=device).requires_grad_(True)
x_0 = torch.rand(N_B, 1, device=device) * 2 - 1
t_0 = torch.zeros(N_B, 1, device=device)
u_0 = -torch.sin(math.pi * x_0)
t_b = torch.rand(N_B, 1, device=device)
x_b = torch.where(torch.rand(N_B, 1, device=device) < 0.5, -1.0, 1.0)


def burgers_loss():
    u = model(x_f, t_f)
    u_t = d(u, t_f)
    u_x = d(u, x_f)
    u_xx = d(u_x, x_f)
    res = u_t + u * u_x - NU * u_xx
    loss_f = res.pow(2).mean()
    loss_0 = (model(x_0, t_0) - u_0).pow(2).mean()
    loss_b = model(x_b, t_b).pow(2).mean()
    return loss_f + loss_0 + loss_b


opt = torch.optim.Adam(model.parameters(), lr=1e-3)


def adam_step():
    opt.zero_grad()
    loss = burgers_loss()
    loss.backward()
    opt.step()
    return loss


loss = adam_step()
print(f"adam step 0 loss {loss.item():.5f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(ADAM_STEPS):
    loss = adam_step()
print(f"adam step {ADAM_STEPS} loss {loss.item():.5f}")
if device == "cuda":
    print(f"adam peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

lbfgs = torch.optim.LBFGS(
    model.parameters(), lr=1.0, max_iter=LBFGS_ITERS, history_size=50, line_search_fn="strong_wolfe"
)


def closure():
    lbfgs.zero_grad()
    loss = burgers_loss()
    loss.backward()
    return loss


loss = lbfgs.step(closure)
print(f"lbfgs loss {loss.item():.5f} iterations {lbfgs.state[lbfgs._params[0]]['n_iter']}")
if device == "cuda":
    print(f"lbfgs peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    xs = torch.linspace(-1, 1, GRID_X, device=device)
    ts = torch.linspace(0, 1, GRID_T, device=device)
    X, T = torch.meshgrid(xs, ts, indexing="ij")
    u_grid = model(X.reshape(-1, 1), T.reshape(-1, 1)).reshape(GRID_X, GRID_T)
    u_grid_host = u_grid.cpu()
print(f"u grid range {u_grid_host.min():.4f} {u_grid_host.max():.4f}")
x_t = (torch.rand(N_TEST, 1, device=device) * 2 - 1).requires_grad_(True)
t_t = torch.rand(N_TEST, 1, device=device).requires_grad_(True)
u = model(x_t, t_t)
u_x, u_t = torch.autograd.grad(u, (x_t, t_t), torch.ones_like(u), create_graph=True)
u_xx = d(u_x, x_t, create_graph=False)
test_res = (u_t + u * u_x - NU * u_xx).detach().abs().mean()
print(f"test residual {test_res.item():.5f}")
del u, u_x, u_t, u_xx
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

heat = MLP(3, 160, 6, 1, act=nn.SiLU).to(device, torch.float64)
heat_opt = torch.optim.Adam(heat.parameters(), lr=5e-4)
xyz = torch.rand(N_HEAT, 3, device=device, dtype=torch.float64)
ALPHA = 0.1
for step in range(5):
    x, y, t = [c.clone().requires_grad_(True) for c in xyz.split(1, dim=1)]
    u = heat(x, y, t)
    u_t = d(u, t)
    u_xx = d(d(u, x), x)
    u_yy = d(d(u, y), y)
    f = torch.exp(-t) * torch.sin(math.pi * x) * torch.sin(math.pi * y)
    res = u_t - ALPHA * (u_xx + u_yy) - f
    loss = res.pow(2).mean() + heat(x, y, torch.zeros_like(t)).pow(2).mean()
    heat_opt.zero_grad(set_to_none=True)
    loss.backward()
    heat_opt.step()
    print(f"heat step {step} loss {loss.item():.6f}")
if device == "cuda":
    print(f"heat peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
