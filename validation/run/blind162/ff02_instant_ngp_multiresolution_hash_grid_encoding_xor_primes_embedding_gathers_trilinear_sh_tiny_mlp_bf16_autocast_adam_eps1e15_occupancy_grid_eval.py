"""An instant-NGP-style radiance field in plain PyTorch as HashNeRF-pytorch (yashbhalgat) writes its
HashEmbedder: 16 levels of a multiresolution hash grid (base resolution 16, finest 2,048, growth
factor b = exp((ln 2048 - ln 16) / 15)), one nn.Embedding of 2^19 x 2 features a level (uniform
init in +-1e-4), each point's voxel found by floor, its 8 corner vertices' integer coordinates
hashed by the spatial hash (x * 1 xor y * 2654435761 xor z * 805459861, masked to 2^19 - 1), the 8
corner embeddings gathered and trilinearly interpolated (weights from the point's offset in the
voxel); the view direction by degree-4 spherical harmonics (16 coefficients); a tiny MLP (32 ->
64 -> 16: sigma and a 15-wide geometric feature, then 31 -> 64 -> 64 -> 3 for colour, no biases);
volume rendering of 128 uniform samples on each of 8,192 rays (1,048,576 points a step) with a
cumprod transmittance. bf16 autocast over fp32 tables and weights, Adam (betas 0.9/0.99, eps 1e-15)
with the tables at lr 1e-2 and the MLPs at 1e-2 with weight decay 1e-6, 3 steps (each its own
phase), then an occupancy-grid update: the density at one jittered point in each cell of a 128^3
grid (2,097,152 points) under no_grad in chunks of 2^20, kept as an exponential moving average
(decay 0.95) and thresholded; then a second pass at 4 times the points' count in one batch of
2^22 under inference_mode; 5 phases."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16202)
if SMALL:
    LEVELS, LOG2_T, FINEST, N_RAYS, N_SAMPLES, GRID, CHUNK, BIG, STEPS = 4, 10, 64, 64, 16, 8, 256, 1024, 3
else:
    LEVELS, LOG2_T, FINEST, N_RAYS, N_SAMPLES, GRID, CHUNK, BIG, STEPS = (
        16,
        19,
        2048,
        8192,
        128,
        128,
        2**20,
        2**22,
        3,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")

BOX_OFFSETS = torch.tensor([[[i, j, k] for i in [0, 1] for j in [0, 1] for k in [0, 1]]], device=device)


def hash(coords, log2_hashmap_size):
    """coords: (..., 3) integer vertex coordinates."""
    primes = [1, 2654435761, 805459861]
    xor_result = torch.zeros_like(coords)[..., 0]
    for i in range(coords.shape[-1]):
        xor_result ^= coords[..., i] * primes[i]
    return torch.tensor((1 << log2_hashmap_size) - 1).to(xor_result.device) & xor_result


def get_voxel_vertices(xyz, bounding_box, resolution, log2_hashmap_size):
    box_min, box_max = bounding_box
    keep_mask = xyz == torch.max(torch.min(xyz, box_max), box_min)
    if not torch.all(xyz <= box_max) or not torch.all(xyz >= box_min):
        xyz = torch.clamp(xyz, min=box_min, max=box_max)
    grid_size = (box_max - box_min) / resolution
    bottom_left_idx = torch.floor((xyz - box_min) / grid_size).int()
    voxel_min_vertex = bottom_left_idx * grid_size + box_min
    voxel_max_vertex = voxel_min_vertex + torch.tensor([1.0, 1.0, 1.0], device=xyz.device) * grid_size
    voxel_indices = bottom_left_idx.unsqueeze(1) + BOX_OFFSETS
    hashed_voxel_indices = hash(voxel_indices, log2_hashmap_size)
    return voxel_min_vertex, voxel_max_vertex, hashed_voxel_indices, keep_mask


class HashEmbedder(nn.Module):
    def __init__(
        self, bounding_box, n_levels=16, n_features_per_level=2, log2_hashmap_size=19, base_resolution=16,
        finest_resolution=512,
    ):  # fmt: skip
        super().__init__()
        self.bounding_box = bounding_box
        self.n_levels = n_levels
        self.n_features_per_level = n_features_per_level
        self.log2_hashmap_size = log2_hashmap_size
        self.base_resolution = torch.tensor(base_resolution)
        self.finest_resolution = torch.tensor(finest_resolution)
        self.out_dim = self.n_levels * self.n_features_per_level
        self.b = torch.exp(
            (torch.log(self.finest_resolution) - torch.log(self.base_resolution)) / (n_levels - 1)
        )
        self.embeddings = nn.ModuleList(
            [nn.Embedding(2**self.log2_hashmap_size, self.n_features_per_level) for i in range(n_levels)]
        )
        for i in range(n_levels):
            nn.init.uniform_(self.embeddings[i].weight, a=-0.0001, b=0.0001)

    def trilinear_interp(self, x, voxel_min_vertex, voxel_max_vertex, voxel_embedds):
        weights = (x - voxel_min_vertex) / (voxel_max_vertex - voxel_min_vertex)  # B x 3
        c00 = (
            voxel_embedds[:, 0] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 4] * weights[:, 0][:, None]
        )
        c01 = (
            voxel_embedds[:, 1] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 5] * weights[:, 0][:, None]
        )
        c10 = (
            voxel_embedds[:, 2] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 6] * weights[:, 0][:, None]
        )
        c11 = (
            voxel_embedds[:, 3] * (1 - weights[:, 0][:, None]) + voxel_embedds[:, 7] * weights[:, 0][:, None]
        )
        c0 = c00 * (1 - weights[:, 1][:, None]) + c10 * weights[:, 1][:, None]
        c1 = c01 * (1 - weights[:, 1][:, None]) + c11 * weights[:, 1][:, None]
        c = c0 * (1 - weights[:, 2][:, None]) + c1 * weights[:, 2][:, None]
        return c

    def forward(self, x):
        x_embedded_all = []
        for i in range(self.n_levels):
            resolution = torch.floor(self.base_resolution * self.b**i)
            voxel_min_vertex, voxel_max_vertex, hashed_voxel_indices, keep_mask = get_voxel_vertices(
                x, self.bounding_box, resolution, self.log2_hashmap_size
            )
            voxel_embedds = self.embeddings[i](hashed_voxel_indices)
            x_embedded = self.trilinear_interp(x, voxel_min_vertex, voxel_max_vertex, voxel_embedds)
            x_embedded_all.append(x_embedded)
        keep_mask = keep_mask.sum(dim=-1) == keep_mask.shape[-1]
        return torch.cat(x_embedded_all, dim=-1), keep_mask


class SHEncoder(nn.Module):
    def __init__(self, input_dim=3, degree=4):
        super().__init__()
        self.input_dim, self.degree = input_dim, degree
        self.out_dim = degree**2
        self.C0 = 0.28209479177387814
        self.C1 = 0.4886025119029199
        self.C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792,
                   0.5462742152960396]  # fmt: skip
        self.C3 = [-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
                   -0.4570457994644658, 1.445305721320277, -0.5900435899266435]  # fmt: skip

    def forward(self, input, **kwargs):
        result = torch.empty((*input.shape[:-1], self.out_dim), dtype=input.dtype, device=input.device)
        x, y, z = input.unbind(-1)
        result[..., 0] = self.C0
        result[..., 1] = -self.C1 * y
        result[..., 2] = self.C1 * z
        result[..., 3] = -self.C1 * x
        xx, yy, zz = x * x, y * y, z * z
        xy, yz, xz = x * y, y * z, x * z
        result[..., 4] = self.C2[0] * xy
        result[..., 5] = self.C2[1] * yz
        result[..., 6] = self.C2[2] * (2.0 * zz - xx - yy)
        result[..., 7] = self.C2[3] * xz
        result[..., 8] = self.C2[4] * (xx - yy)
        result[..., 9] = self.C3[0] * y * (3 * xx - yy)
        result[..., 10] = self.C3[1] * xy * z
        result[..., 11] = self.C3[2] * y * (4 * zz - xx - yy)
        result[..., 12] = self.C3[3] * z * (2 * zz - 3 * xx - 3 * yy)
        result[..., 13] = self.C3[4] * x * (4 * zz - xx - yy)
        result[..., 14] = self.C3[5] * z * (xx - yy)
        result[..., 15] = self.C3[6] * x * (xx - 3 * yy)
        return result


class NeRFSmall(nn.Module):
    def __init__(self, num_layers=2, hidden_dim=64, geo_feat_dim=15, num_layers_color=3, hidden_dim_color=64,
                 input_ch=3, input_ch_views=3):  # fmt: skip
        super().__init__()
        self.input_ch, self.input_ch_views = input_ch, input_ch_views
        self.geo_feat_dim = geo_feat_dim
        sigma_net = []
        for li in range(num_layers):
            in_dim = self.input_ch if li == 0 else hidden_dim
            out_dim = 1 + self.geo_feat_dim if li == num_layers - 1 else hidden_dim
            sigma_net.append(nn.Linear(in_dim, out_dim, bias=False))
        self.sigma_net = nn.ModuleList(sigma_net)
        color_net = []
        for li in range(num_layers_color):
            in_dim = self.input_ch_views + self.geo_feat_dim if li == 0 else hidden_dim_color
            out_dim = 3 if li == num_layers_color - 1 else hidden_dim_color
            color_net.append(nn.Linear(in_dim, out_dim, bias=False))
        self.color_net = nn.ModuleList(color_net)

    def density(self, input_pts):
        h = input_pts
        for li in range(len(self.sigma_net)):
            h = self.sigma_net[li](h)
            if li != len(self.sigma_net) - 1:
                h = F.relu(h, inplace=True)
        return h

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = self.density(input_pts)
        sigma, geo_feat = h[..., 0], h[..., 1:]
        h = torch.cat([input_views, geo_feat], dim=-1)
        for li in range(len(self.color_net)):
            h = self.color_net[li](h)
            if li != len(self.color_net) - 1:
                h = F.relu(h, inplace=True)
        color = h
        return torch.cat([color, sigma.unsqueeze(dim=-1)], -1)


bounding_box = (torch.tensor([-1.5, -1.5, -1.5], device=device), torch.tensor([1.5, 1.5, 1.5], device=device))
embed_fn = HashEmbedder(bounding_box, n_levels=LEVELS, log2_hashmap_size=LOG2_T, finest_resolution=FINEST).to(
    device
)
embeddirs_fn = SHEncoder().to(device)
model = NeRFSmall(input_ch=embed_fn.out_dim, input_ch_views=embeddirs_fn.out_dim).to(device)
optimizer = torch.optim.Adam(
    [
        {"params": model.parameters(), "weight_decay": 1e-6},
        {"params": embed_fn.parameters(), "eps": 1e-15},
    ],
    lr=1e-2,
    betas=(0.9, 0.99),
)


def render(rays_o, rays_d, near=0.5, far=2.5):
    n = rays_o.shape[0]
    t_vals = torch.linspace(0.0, 1.0, steps=N_SAMPLES, device=rays_o.device)
    z_vals = (near * (1.0 - t_vals) + far * t_vals).expand(n, N_SAMPLES)
    mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    upper = torch.cat([mids, z_vals[..., -1:]], -1)
    lower = torch.cat([z_vals[..., :1], mids], -1)
    z_vals = lower + (upper - lower) * torch.rand(z_vals.shape, device=z_vals.device)
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
    pts_flat = pts.reshape(-1, 3)
    dirs_flat = viewdirs[:, None].expand(pts.shape).reshape(-1, 3)
    embedded, keep_mask = embed_fn(pts_flat)
    embedded_dirs = embeddirs_fn(dirs_flat)
    with torch.autocast(**amp):
        raw = model(torch.cat([embedded, embedded_dirs], -1))
    raw = raw.float()
    raw[~keep_mask, -1] = 0
    raw = raw.reshape(n, N_SAMPLES, 4)
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.full_like(dists[..., :1], 1e10)], -1) * torch.norm(
        rays_d[..., None, :], dim=-1
    )
    alpha = 1.0 - torch.exp(-F.relu(raw[..., 3]) * dists)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    weights = alpha * trans
    rgb = torch.sum(weights[..., None] * torch.sigmoid(raw[..., :3]), -2)
    return rgb, weights


def total_variation_loss(embeddings, min_resolution, max_resolution, level, log2_hashmap_size, n_levels=16):
    b = np.exp((np.log(max_resolution) - np.log(min_resolution)) / (n_levels - 1))
    resolution = torch.tensor(np.floor(min_resolution * b**level)).int()
    cube_size = torch.floor(torch.clip(resolution / 10.0, 0, 16)).int().item()
    min_vertex = torch.randint(0, int(resolution) - cube_size, (3,))
    idx = min_vertex + torch.stack([torch.arange(cube_size + 1) for _ in range(3)], dim=-1)
    cube_indices = torch.stack(torch.meshgrid(idx[:, 0], idx[:, 1], idx[:, 2], indexing="ij"), dim=-1).to(
        device
    )
    hashed_indices = hash(cube_indices, log2_hashmap_size)
    cube_embeddings = embeddings(hashed_indices)
    tv_x = torch.pow(cube_embeddings[1:, :, :, :] - cube_embeddings[:-1, :, :, :], 2).sum()
    tv_y = torch.pow(cube_embeddings[:, 1:, :, :] - cube_embeddings[:, :-1, :, :], 2).sum()
    tv_z = torch.pow(cube_embeddings[:, :, 1:, :] - cube_embeddings[:, :, :-1, :], 2).sum()
    return (tv_x + tv_y + tv_z) / cube_size


target_rgb = torch.rand(STEPS, N_RAYS, 3, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS):
    rays_o = torch.randn(N_RAYS, 3, device=device)
    rays_o = 2.0 * rays_o / rays_o.norm(dim=-1, keepdim=True)
    rays_d = -rays_o + 0.3 * torch.randn(N_RAYS, 3, device=device)
    rgb, weights = render(rays_o, rays_d)
    loss = F.mse_loss(rgb, target_rgb[step])
    sparsity_loss = -(weights * torch.log(weights + 1e-10)).sum(-1).mean()
    tv_loss = sum(
        total_variation_loss(embed_fn.embeddings[i], 16, FINEST, i, LOG2_T, n_levels=LEVELS)
        for i in range(LEVELS)
    )
    total = loss + 1e-4 * sparsity_loss + 1e-6 * tv_loss
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del rgb, weights, loss, total, sparsity_loss, tv_loss
density_grid = torch.zeros(GRID**3, device=device)
cells = torch.stack(
    torch.meshgrid(*[torch.arange(GRID, device=device)] * 3, indexing="ij"),
    dim=-1,
).reshape(-1, 3)
with torch.no_grad():
    new_density = torch.empty_like(density_grid)
    for start in range(0, cells.shape[0], CHUNK):
        c = cells[start : start + CHUNK]
        xyz = (c + torch.rand_like(c, dtype=torch.float32)) / GRID * 3.0 - 1.5
        h, _ = embed_fn(xyz)
        with torch.autocast(**amp):
            sigma = model.density(h)[..., 0]
        new_density[start : start + CHUNK] = F.relu(sigma.float())
    density_grid = torch.maximum(density_grid * 0.95, new_density)
    occupancy = density_grid > 0.01 * density_grid.mean().clamp(max=0.01)
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"occupancy {occupancy.float().mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    xyz = torch.rand(BIG, 3, device=device) * 3.0 - 1.5
    h, keep = embed_fn(xyz)
    with torch.autocast(**amp):
        sigma = model.density(h)[..., 0]
    sigma = torch.where(keep, sigma.float(), torch.zeros_like(sigma, dtype=torch.float32))
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"query {sigma.shape[0]} mean {sigma.mean().item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
