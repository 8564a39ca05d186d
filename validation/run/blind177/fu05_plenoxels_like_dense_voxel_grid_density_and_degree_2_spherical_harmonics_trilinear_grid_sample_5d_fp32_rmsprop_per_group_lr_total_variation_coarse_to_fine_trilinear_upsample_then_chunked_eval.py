"""A Plenoxels-like radiance field (Fridovich-Keil et al. 2022, sxyu/svox2) in plain PyTorch, without
the sparse CUDA kernels: a dense voxel grid of densities (1 x 1 x 128^3) and degree-2 spherical
harmonics coefficients (1 x 27 x 128^3: 9 per color channel) as two Parameters over the [-1.5, 1.5]^3
box, sampled by 5-D F.grid_sample (trilinear, align_corners=True) at 8,192 rays x 128 jittered samples
per batch (1M points), the SH basis evaluated per view direction and summed against the coefficients,
ReLU densities, volume rendering by alpha compositing (exclusive cumprod), the MSE plus svox2-style
total-variation regularizers (squared neighbor differences of the density and SH grids, by slicing).
fp32; RMSprop as svox2's (alpha 0.95, eps 1e-8) with two parameter groups (density lr 30, SH lr 1e-2);
the first step its own phase, then 3 steps; then the coarse-to-fine upsample of both grids to 192^3
(F.interpolate trilinear with align_corners=True into new Parameters) with the optimizer built anew,
2 steps at 192 samples per ray; then a 512 x 512 view rendered under no_grad in chunks of 16,384 rays
with the per-chunk MSE against a target; 4 phases after the setup."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17705)
if SMALL:
    RESO, RESO_UP, N_RAYS, N_SAMPLES, N_SAMPLES_UP, STEPS, IMG, CHUNK = 16, 24, 64, 16, 24, 2, 16, 64
else:
    RESO, RESO_UP, N_RAYS, N_SAMPLES, N_SAMPLES_UP, STEPS, IMG, CHUNK = (
        128,
        192,
        8192,
        128,
        192,
        4,
        512,
        16384,
    )
NEAR, FAR = 2.0, 6.0
LAMBDA_TV, LAMBDA_TV_SH = 1e-5, 1e-3
device = "cuda" if torch.cuda.is_available() else "cpu"

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = [
    1.0925484305920792,
    -1.0925484305920792,
    0.31539156525252005,
    -1.0925484305920792,
    0.5462742152960396,
]


def eval_sh_bases(dirs):
    x, y, z = dirs.unbind(-1)
    xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
    return torch.stack(
        [
            torch.full_like(x, SH_C0),
            -SH_C1 * y,
            SH_C1 * z,
            -SH_C1 * x,
            SH_C2[0] * xy,
            SH_C2[1] * yz,
            SH_C2[2] * (2.0 * zz - xx - yy),
            SH_C2[3] * xz,
            SH_C2[4] * (xx - yy),
        ],
        -1,
    )


class DenseGrid(nn.Module):
    def __init__(self, reso):
        super().__init__()
        self.reso = reso
        self.density_data = nn.Parameter(torch.full((1, 1, reso, reso, reso), 0.1))
        self.sh_data = nn.Parameter(torch.zeros(1, 27, reso, reso, reso))

    def sample(self, pts):
        grid = (pts / 1.5).view(1, 1, 1, -1, 3)
        sigma = F.grid_sample(self.density_data, grid, mode="bilinear", align_corners=True).view(-1)
        sh = F.grid_sample(self.sh_data, grid, mode="bilinear", align_corners=True).view(27, -1).t()
        return sigma, sh.reshape(-1, 3, 9)

    def forward(self, rays_o, rays_d, n_samples, randomize=True):
        n = rays_o.shape[0]
        step = (FAR - NEAR) / n_samples
        t = NEAR + step * torch.arange(n_samples, device=rays_o.device, dtype=torch.float32).expand(
            n, n_samples
        )
        if randomize:
            t = t + torch.rand(n, n_samples, device=rays_o.device) * step
        pts = rays_o[:, None, :] + rays_d[:, None, :] * t[..., None]
        sigma, sh = self.sample(pts.reshape(-1, 3))
        basis = eval_sh_bases(rays_d)[:, None, None, :].expand(n, n_samples, 1, 9).reshape(-1, 1, 9)
        rgb = torch.clamp_min(torch.sum(sh * basis, -1) + 0.5, 0.0).view(n, n_samples, 3)
        sigma = F.relu(sigma).view(n, n_samples)
        alpha = 1.0 - torch.exp(-sigma * step)
        T = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1.0 - alpha + 1e-10], -1), -1)
        weights = alpha * T[:, :-1]
        return torch.sum(weights[..., None] * rgb, 1) + T[:, -1:]

    def tv(self, data):
        dx = data[:, :, 1:, :-1, :-1] - data[:, :, :-1, :-1, :-1]
        dy = data[:, :, :-1, 1:, :-1] - data[:, :, :-1, :-1, :-1]
        dz = data[:, :, :-1, :-1, 1:] - data[:, :, :-1, :-1, :-1]
        return (dx * dx + dy * dy + dz * dz).mean()

    @torch.no_grad()
    def resample(self, reso):
        size = (reso, reso, reso)
        self.density_data = nn.Parameter(
            F.interpolate(self.density_data.data, size=size, mode="trilinear", align_corners=True)
        )
        self.sh_data = nn.Parameter(
            F.interpolate(self.sh_data.data, size=size, mode="trilinear", align_corners=True)
        )
        self.reso = reso


def make_optimizer(grid):
    return torch.optim.RMSprop(
        [{"params": [grid.density_data], "lr": 30.0}, {"params": [grid.sh_data], "lr": 1e-2}],
        alpha=0.95,
        eps=1e-8,
    )


def random_rays(n):
    theta = torch.rand(n, device=device) * 2 * math.pi
    phi = torch.rand(n, device=device) * 0.6 + 0.3
    o = 4.0 * torch.stack(
        [torch.cos(theta) * torch.cos(phi), torch.sin(theta) * torch.cos(phi), torch.sin(phi)], -1
    )
    d = (torch.rand(n, 3, device=device) - 0.5) * 1.2 - o
    return o, d / d.norm(dim=-1, keepdim=True)


grid = DenseGrid(RESO).to(device)
optimizer = make_optimizer(grid)
print(f"params {sum(p.numel() for p in grid.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(n_samples):
    rays_o, rays_d = random_rays(N_RAYS)
    target = torch.rand(N_RAYS, 3, device=device)
    rgb = grid(rays_o, rays_d, n_samples)
    mse = F.mse_loss(rgb, target)
    loss = mse + LAMBDA_TV * grid.tv(grid.density_data) + LAMBDA_TV_SH * grid.tv(grid.sh_data)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return mse.item()


for step in range(STEPS):
    mse = train_step(N_SAMPLES)
    print(f"step {step} mse {mse:.4f} psnr {-10 * math.log10(max(mse, 1e-10)):.2f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

grid.resample(RESO_UP)
optimizer = make_optimizer(grid)
for step in range(2):
    mse = train_step(N_SAMPLES_UP)
    print(f"fine step {step} mse {mse:.4f}")
if device == "cuda":
    print(f"upsample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    lin = torch.linspace(-1, 1, IMG, device=device)
    u, v = torch.meshgrid(lin, lin, indexing="xy")
    c2w_o = torch.tensor([0.0, -4.0, 1.0], device=device)
    dirs = torch.stack([u * 0.35, torch.ones_like(u), -v * 0.35 - 0.25], -1).reshape(-1, 3)
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    target = torch.rand(dirs.shape[0], 3, device=device)
    out, mses = [], []
    for i in range(0, dirs.shape[0], CHUNK):
        rgb = grid(
            c2w_o.expand(dirs[i : i + CHUNK].shape), dirs[i : i + CHUNK], N_SAMPLES_UP, randomize=False
        )
        mses.append(F.mse_loss(rgb, target[i : i + CHUNK], reduction="none").mean(-1))
        out.append(rgb)
    img = torch.cat(out).view(IMG, IMG, 3)
    psnr = -10 * torch.log10(torch.cat(mses).mean())
print(f"eval {tuple(img.shape)} psnr {psnr.item():.2f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
