"""Physics-informed neural networks for incompressible Navier-Stokes: Raissi's 2-D cylinder-wake
formulation with a stream function, then a 3-D Beltrami-flow PINN (Jin et al. 2021, NSFnets).

2-D: a "modified MLP" (Wang, Teng and Perdikaris 2021) on (x, y, t): a random Fourier-feature embedding
(3 -> 128 sin/cos pairs, a fixed Gaussian matrix with sigma 1), two gate encoders U = tanh(W_u h),
V = tanh(W_v h), four hidden layers of width 256 each mixing z * U + (1 - z) * V, outputs (psi, p).
u = psi_y and v = -psi_x; the momentum residuals use u_t, u_x, u_y, u_xx, u_yy (third derivatives of psi),
the same for v, and p_x, p_y, all from torch.autograd.grad with create_graph=True on separate coordinate
tensors; Re = 100. 24,576 collocation points resampled on the device each step plus 4,096 points with
velocity data, fp32, fused AdamW (lr 1e-3) and clip_grad_norm_(1.0).

Phases: the first step; 5 more steps; an evaluation of u, v, p and the vorticity v_x - u_y on a 200 x 100
grid at 10 times, in chunks of 50,000 points (first derivatives with create_graph so that the second ones
exist, everything detached and moved to the host); then a 3-D Beltrami-flow PINN (x, y, z, t) ->
(u, v, w, p) (an MLP of 5 tanh layers of width 200, Re = 1) trained 3 steps of non-foreach Adam on 40,000
points with every partial taken from a single input tensor X (torch.autograd.grad(u, X) gives all four
first derivatives, second derivatives from grads of their columns). 4 phases."""

import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1966)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N_F, N_D, STEPS, NX, NY, NT, CHUNK, N3, W, W3 = 256, 64, 1, 20, 10, 2, 150, 256, 32, 24
else:
    N_F, N_D, STEPS, NX, NY, NT, CHUNK, N3, W, W3 = 24576, 4096, 5, 200, 100, 10, 50_000, 40_000, 256, 200
RE = 100.0


class ModifiedMLP(nn.Module):
    def __init__(self, n_in, width, depth, n_out, n_ff=128, sigma=1.0):
        super().__init__()
        self.register_buffer("B", torch.randn(n_in, n_ff) * sigma)
        d = 2 * n_ff
        self.U = nn.Linear(d, width)
        self.V = nn.Linear(d, width)
        self.first = nn.Linear(d, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth - 1))
        self.out = nn.Linear(width, n_out)

    def forward(self, x):
        proj = 2 * math.pi * x @ self.B
        h = torch.cat([torch.sin(proj), torch.cos(proj)], dim=-1)
        u, v = torch.tanh(self.U(h)), torch.tanh(self.V(h))
        z = torch.tanh(self.first(h))
        h = z * u + (1 - z) * v
        for layer in self.hidden:
            z = torch.tanh(layer(h))
            h = z * u + (1 - z) * v
        return self.out(h)


def d(y, x, create_graph=True):
    return torch.autograd.grad(y, x, torch.ones_like(y), create_graph=create_graph)[0]


net = ModifiedMLP(3, W, 4, 2).to(device)
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=device == "cuda")
print(f"NS PINN params {sum(p.numel() for p in net.parameters())}")


def uvp(x, y, t, create_graph=True):
    out = net(torch.cat([x, y, t], dim=1))
    psi, p = out[:, :1], out[:, 1:]
    u = d(psi, y, create_graph)
    v = -d(psi, x, create_graph)
    return u, v, p


def ns_step():
    x = (torch.rand(N_F, 1, device=device) * 8 + 1).requires_grad_(True)
    y = (torch.rand(N_F, 1, device=device) * 4 - 2).requires_grad_(True)
    t = (torch.rand(N_F, 1, device=device) * 20).requires_grad_(True)
    u, v, p = uvp(x, y, t)
    u_t, u_x, u_y = d(u, t), d(u, x), d(u, y)
    v_t, v_x, v_y = d(v, t), d(v, x), d(v, y)
    u_xx, u_yy, v_xx, v_yy = d(u_x, x), d(u_y, y), d(v_x, x), d(v_y, y)
    p_x, p_y = d(p, x), d(p, y)
    f_u = u_t + u * u_x + v * u_y + p_x - (u_xx + u_yy) / RE
    f_v = v_t + u * v_x + v * v_y + p_y - (v_xx + v_yy) / RE
    xd = (torch.rand(N_D, 1, device=device) * 8 + 1).requires_grad_(True)
    yd = (torch.rand(N_D, 1, device=device) * 4 - 2).requires_grad_(True)
    td = torch.rand(N_D, 1, device=device) * 20
    ud, vd, _ = uvp(xd, yd, td)
    u_obs, v_obs = torch.randn(N_D, 1, device=device), torch.randn(N_D, 1, device=device)
    loss = f_u.pow(2).mean() + f_v.pow(2).mean() + (ud - u_obs).pow(2).mean() + (vd - v_obs).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    return loss.item(), gnorm.item()


loss, gnorm = ns_step()
print(f"step 0 loss {loss:.4f} grad norm {gnorm:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(STEPS):
    loss, gnorm = ns_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gx = torch.linspace(1, 9, NX, device=device)
gy = torch.linspace(-2, 2, NY, device=device)
gt = torch.linspace(0, 20, NT, device=device)
pts = torch.stack(torch.meshgrid(gx, gy, gt, indexing="ij"), -1).reshape(-1, 3)
fields = []
for i in range(0, pts.shape[0], CHUNK):
    c = pts[i : i + CHUNK]
    x, y, t = [c[:, j : j + 1].clone().requires_grad_(True) for j in range(3)]
    u, v, p = uvp(x, y, t)
    v_x = torch.autograd.grad(v, x, torch.ones_like(v), retain_graph=True)[0]
    omega = v_x - d(u, y, False)
    fields.append(torch.cat([u, v, p, omega], 1).detach().cpu())
    del u, v, p, v_x, omega
fields = torch.cat(fields).reshape(NX, NY, NT, 4)
print(f"eval fields {tuple(fields.shape)} max vorticity {fields[..., 3].abs().max():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

layers = [nn.Linear(4, W3), nn.Tanh()]
for _ in range(4):
    layers += [nn.Linear(W3, W3), nn.Tanh()]
layers.append(nn.Linear(W3, 4))
net3 = nn.Sequential(*layers).to(device)
opt3 = torch.optim.Adam(net3.parameters(), lr=1e-3, foreach=False)


def partials(f, X):
    g = d(f, X)
    second = [d(g[:, j : j + 1], X)[:, j : j + 1] for j in range(3)]
    return g[:, 0:1], g[:, 1:2], g[:, 2:3], g[:, 3:4], sum(second)


for step in range(3):
    X = (torch.rand(N3, 4, device=device) * 2 - 1).requires_grad_(True)
    out = net3(X)
    u, v, w, p = out[:, 0:1], out[:, 1:2], out[:, 2:3], out[:, 3:4]
    u_x, u_y, u_z, u_t, lap_u = partials(u, X)
    v_x, v_y, v_z, v_t, lap_v = partials(v, X)
    w_x, w_y, w_z, w_t, lap_w = partials(w, X)
    p_grad = d(p, X)
    r_u = u_t + u * u_x + v * u_y + w * u_z + p_grad[:, 0:1] - lap_u
    r_v = v_t + u * v_x + v * v_y + w * v_z + p_grad[:, 1:2] - lap_v
    r_w = w_t + u * w_x + v * w_y + w * w_z + p_grad[:, 2:3] - lap_w
    div = u_x + v_y + w_z
    loss = r_u.pow(2).mean() + r_v.pow(2).mean() + r_w.pow(2).mean() + div.pow(2).mean()
    opt3.zero_grad()
    loss.backward()
    opt3.step()
    print(f"beltrami step {step} loss {loss.item():.5f}")
if device == "cuda":
    print(f"beltrami peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
