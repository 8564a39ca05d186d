"""DeepONet (Lu et al. 2021) for a 1-D diffusion-reaction solution operator u(x) -> s(x, t), written by
hand, then a physics-informed DeepONet (Wang et al. 2021) for the same PDE in fp64.

Data-driven DeepONet: the input function u is sampled at 128 fixed sensors; a branch MLP 128 -> 512 ->
512 -> 512 -> 256 (ReLU) and a trunk MLP (x, t) -> 256 -> 256 -> 256 -> 256 (tanh, the last layer
activated as well) give 256 basis coefficients and basis functions; G(u)(y) = sum_k b_k t_k + b0 via
torch.einsum("bk,bpk->bp"). Unaligned data: each of the 512 functions in a batch has its own 2,000 random
query points (trunk input of shape 512 x 2,000 x 2). fp32, foreach Adam (lr 1e-3) with ExponentialLR,
MSE loss; after the first step each optimizer step accumulates two micro-batches of 512 functions.

Phases: the first step; 5 steps of two micro-batches; an evaluation under torch.inference_mode of 1,000
test functions on an aligned 100 x 100 grid (the trunk run once on the 10,000 points, "bk,pk->bp"), in
chunks of 250 functions with the predictions moved to the host; then a physics-informed DeepONet in fp64
(branch 128 -> 256 x 3 -> 128, trunk 2 -> 128 x 4 -> 128, tanh) trained 3 Adam steps with the residual
s_t - 0.01 s_xx - 0.01 s^2 - u(x) at 1,000 collocation points per function for 256 functions (s_t, s_x
from torch.autograd.grad with create_graph=True, s_xx from a second grad; u(x) interpolated from the
sensor values by torch gather) plus the initial condition s(x, 0) = 0. 4 phases."""

import itertools
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1963)
device = "cuda" if torch.cuda.is_available() else "cpu"
M = 128
if SMALL:
    B, P, STEPS, N_TEST, GRID, CHUNK, PI_B, PI_P = 8, 32, 1, 20, 10, 10, 4, 16
else:
    B, P, STEPS, N_TEST, GRID, CHUNK, PI_B, PI_P = 512, 2000, 5, 1000, 100, 250, 256, 1000


def mlp(sizes, act, last_act):
    layers = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_act:
            layers.append(act())
    return nn.Sequential(*layers)


class DeepONet(nn.Module):
    def __init__(self, branch, trunk, act_b=nn.ReLU, act_t=nn.Tanh):
        super().__init__()
        self.branch = mlp(branch, act_b, False)
        self.trunk = mlp(trunk, act_t, True)
        self.b0 = nn.Parameter(torch.zeros(1))

    def forward(self, u, y):
        b = self.branch(u)
        t = self.trunk(y)
        if t.dim() == 3:
            return torch.einsum("bk,bpk->bp", b, t) + self.b0
        return torch.einsum("bk,pk->bp", b, t) + self.b0


def sample_batch(n, p, dtype=torch.float32):
    u = torch.randn(n, M, device=device, dtype=dtype)
    y = torch.rand(n, p, 2, device=device, dtype=dtype)
    s = torch.randn(n, p, device=device, dtype=dtype)
    return u, y, s


model = DeepONet([M, 512, 512, 512, 256], [2, 256, 256, 256, 256]).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.999)
print(f"DeepONet params {sum(p.numel() for p in model.parameters())}")

u, y, s = sample_batch(B, P)
loss = nn.functional.mse_loss(model(u, y), s)
opt.zero_grad()
loss.backward()
opt.step()
sched.step()
print(f"step 0 loss {loss.item():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    opt.zero_grad()
    for _micro in range(2):
        u, y, s = sample_batch(B, P)
        loss = nn.functional.mse_loss(model(u, y), s) / 2
        loss.backward()
    opt.step()
    sched.step()
print(f"step {STEPS} loss {loss.item() * 2:.4f} lr {sched.get_last_lr()[0]:.6f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
preds = []
with torch.inference_mode():
    g = torch.linspace(0, 1, GRID, device=device)
    grid = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    u_test = torch.randn(N_TEST, M, device=device)
    for i in range(0, N_TEST, CHUNK):
        preds.append(model(u_test[i : i + CHUNK], grid).cpu())
preds = torch.cat(preds)
print(f"test predictions {tuple(preds.shape)} std {preds.std():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

pi = DeepONet([M, 256, 256, 256, 128], [2, 128, 128, 128, 128, 128], act_b=nn.Tanh).to(device, torch.float64)
pi_opt = torch.optim.Adam(pi.parameters(), lr=1e-3)
sensors = torch.linspace(0, 1, M, device=device, dtype=torch.float64)
for step in range(3):
    u = torch.randn(PI_B, M, device=device, dtype=torch.float64)
    x = torch.rand(PI_B, PI_P, 1, device=device, dtype=torch.float64).requires_grad_(True)
    t = torch.rand(PI_B, PI_P, 1, device=device, dtype=torch.float64).requires_grad_(True)
    s = pi(u, torch.cat([x, t], -1))
    s_x, s_t = torch.autograd.grad(s.sum(), (x, t), create_graph=True)
    s_xx = torch.autograd.grad(s_x.sum(), x, create_graph=True)[0]
    idx = (x.detach().squeeze(-1) * (M - 1)).round().long()
    u_at_x = torch.gather(u, 1, idx)
    res = s_t.squeeze(-1) - 0.01 * s_xx.squeeze(-1) - 0.01 * s.pow(2) - u_at_x
    y0 = torch.cat(
        [
            torch.rand(PI_B, 100, 1, device=device, dtype=torch.float64),
            torch.zeros(PI_B, 100, 1, device=device, dtype=torch.float64),
        ],
        -1,
    )
    loss = res.pow(2).mean() + pi(u, y0).pow(2).mean()
    pi_opt.zero_grad()
    loss.backward()
    pi_opt.step()
    print(f"pi-deeponet step {step} loss {loss.item():.5f}")
if device == "cuda":
    print(f"pi-deeponet peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
