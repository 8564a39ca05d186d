"""A SIREN signed distance function written from the paper: 5 sine layers of 256 (omega_0 = 30, the
paper's uniform initialisation), fitted to a union of a torus and a capsule: on-surface points with
their analytic normals and off-surface points uniform in the cube, gradients of the SDF by
`autograd.grad(create_graph=True)`, the SIREN losses (|f| on the surface, 1 - cos to the normals,
the eikonal |grad f| - 1 everywhere, exp(-100|f|) off the surface), fp32, Adam, 3 training steps of
131,072 + 131,072 points; then the SDF on a 192^3 grid in chunks under no_grad and its inside
fraction, and normals of fresh surface samples from the model cast to float64 (`.double()`) by
`autograd.grad` in chunks for a float64 eikonal and normal check; 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12504)
N_SURF, N_OFF = (1024, 1024) if SMALL else (131072, 131072)
HID, DEPTH = (64, 3) if SMALL else (256, 5)
GRID, CHUNK = (24, 4096) if SMALL else (192, 262144)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Sine(nn.Module):
    def __init__(self, d_in, d_out, first=False, w0=30.0):
        super().__init__()
        self.w0 = w0
        self.lin = nn.Linear(d_in, d_out)
        bound = 1 / d_in if first else math.sqrt(6 / d_in) / w0
        nn.init.uniform_(self.lin.weight, -bound, bound)

    def forward(self, x):
        return torch.sin(self.w0 * self.lin(x))


class Siren(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [Sine(3, HID, first=True)] + [Sine(HID, HID) for _ in range(DEPTH - 1)]
        self.net = nn.Sequential(*layers)
        self.out = nn.Linear(HID, 1)
        b = math.sqrt(6 / HID) / 30
        nn.init.uniform_(self.out.weight, -b, b)

    def forward(self, x):
        return self.out(self.net(x))


def surface_samples(n):
    """Half on a torus (R=0.45, r=0.15) in the xy-plane, half on a capsule along z."""
    h = n // 2
    u, v = torch.rand(h, device=device) * 2 * math.pi, torch.rand(h, device=device) * 2 * math.pi
    nrm_t = torch.stack([torch.cos(u) * torch.cos(v), torch.sin(u) * torch.cos(v), torch.sin(v)], -1)
    center = torch.stack([0.45 * torch.cos(u), 0.45 * torch.sin(u), torch.zeros_like(u)], -1)
    p_t = center + 0.15 * nrm_t
    d = F.normalize(torch.randn(n - h, 3, device=device), dim=-1)
    z = (torch.rand(n - h, device=device) - 0.5) * 0.8
    axis = torch.stack([torch.zeros_like(z), torch.zeros_like(z), z.clamp(-0.3, 0.3)], -1)
    side = (z.abs() <= 0.3)[:, None]
    nrm_c = torch.where(side, F.normalize(d * torch.tensor([1.0, 1.0, 0.0], device=device), dim=-1), d)
    p_c = axis + 0.2 * nrm_c
    return torch.cat([p_t, p_c]), torch.cat([nrm_t, nrm_c])


def sdf_grad(model, x, create_graph):
    x = x.requires_grad_()
    f = model(x)
    (g,) = torch.autograd.grad(f, x, torch.ones_like(f), create_graph=create_graph)
    return f, g


model = Siren().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    p_s, n_s = surface_samples(N_SURF)
    p_o = torch.rand(N_OFF, 3, device=device) * 2 - 1
    x = torch.cat([p_s, p_o])
    f, g = sdf_grad(model, x, create_graph=True)
    f_s, f_o, g_s = f[:N_SURF], f[N_SURF:], g[:N_SURF]
    loss = (
        3e3 * f_s.abs().mean()
        + 1e2 * (1 - F.cosine_similarity(g_s, n_s, dim=-1)).mean()
        + 5e1 * (g.norm(dim=-1) - 1).abs().mean()
        + 1e2 * torch.exp(-1e2 * f_o.abs()).mean()
    )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del f, g, f_s, f_o, g_s, loss, x

axis = torch.linspace(-1, 1, GRID, device=device)
grid = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
with torch.no_grad():
    sdf = torch.cat([model(grid[i : i + CHUNK]) for i in range(0, grid.shape[0], CHUNK)])[:, 0]
if device == "cuda":
    print(
        f"grid {tuple(sdf.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

occupancy = (sdf < 0).float().mean()
model64 = model.double()
p_s, n_s = surface_samples(N_SURF)
normals = []
for i in range(0, N_SURF, CHUNK // 8):
    _, g = sdf_grad(model64, p_s[i : i + CHUNK // 8].double(), create_graph=False)
    normals.append(g.detach())
normals = torch.cat(normals)
eik = (normals.norm(dim=-1) - 1).abs().mean()
cos = F.cosine_similarity(normals, n_s.double(), dim=-1).mean()
if device == "cuda":
    print(
        f"normals {tuple(normals.shape)} eikonal {eik.item():.4f} cos {cos.item():.4f}"
        f" inside {occupancy.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
