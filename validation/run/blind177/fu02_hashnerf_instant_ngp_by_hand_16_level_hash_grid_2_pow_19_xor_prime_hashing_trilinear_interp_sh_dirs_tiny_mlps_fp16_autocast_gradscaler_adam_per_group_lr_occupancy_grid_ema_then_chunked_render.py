"""Instant-NGP's multiresolution hash encoding (Mueller et al. 2022) done by hand in PyTorch, after the
yashbhalgat/HashNeRF-pytorch repository: 16 levels from resolution 16 to 512 (geometric growth), a hash
table of 2^19 entries x 2 features per level as nn.Embedding (uniform init +-1e-4), the 8 voxel corners
per point hashed by XOR of int64 coordinates times the primes (1, 2654435761, 805459861) masked to 19
bits, trilinear interpolation of the corner embeddings; view directions by a degree-4 spherical
harmonics encoding written out (16 coefficients); the density MLP (32 -> 64 -> 16: sigma and a 15-wide
geometry feature) and the color MLP (31 -> 64 -> 64 -> 3), no biases as tiny-cuda-nn's FullyFusedMLP.
8,192 rays per batch x 128 stratified samples (1M points), volume rendering with alpha compositing
(exclusive cumprod); Adam with two parameter groups as HashNeRF's (the MLPs with weight decay 1e-6, the
hash tables with eps 1e-15; lr 1e-2, betas 0.9/0.99), the networks under fp16 autocast with a
GradScaler, HashNeRF's sparsity loss on sigma (Cauchy); the first step its own phase, then 3 steps;
then an instant-ngp-style occupancy grid update under no_grad (the 128^3 cell centers jittered, their
densities queried in chunks of 262,144 and folded into an exponential moving average of the grid, a
bitfield by the mean threshold); then a 256 x 256 image rendered in chunks of 8,192 rays under no_grad
and fp16 autocast; 4 phases after the setup."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17702)
if SMALL:
    N_LEVELS, LOG2_T, FINEST, N_RAYS, N_SAMPLES, STEPS, GRID, QCHUNK, IMG, CHUNK = (
        4,
        10,
        64,
        64,
        16,
        2,
        16,
        1024,
        16,
        64,
    )
else:
    N_LEVELS, LOG2_T, FINEST, N_RAYS, N_SAMPLES, STEPS, GRID, QCHUNK, IMG, CHUNK = (
        16,
        19,
        512,
        8192,
        128,
        4,
        128,
        262144,
        256,
        8192,
    )
N_FEAT, BASE = 2, 16
NEAR, FAR = 2.0, 6.0
device = "cuda" if torch.cuda.is_available() else "cpu"
BOX_OFFSETS = torch.tensor([[[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)]], device=device)
PRIMES = [1, 2654435761, 805459861]


def hash(coords, log2_hashmap_size):
    xor_result = torch.zeros_like(coords)[..., 0]
    for i in range(coords.shape[-1]):
        xor_result ^= coords[..., i] * PRIMES[i]
    return torch.tensor((1 << log2_hashmap_size) - 1).to(xor_result.device) & xor_result


def get_voxel_vertices(xyz, bounding_box, resolution, log2_hashmap_size):
    box_min, box_max = bounding_box
    xyz = torch.max(torch.min(xyz, box_max), box_min)
    grid_size = (box_max - box_min) / resolution
    bottom_left_idx = torch.floor((xyz - box_min) / grid_size).long()
    voxel_min_vertex = bottom_left_idx * grid_size + box_min
    voxel_max_vertex = voxel_min_vertex + torch.tensor([1.0, 1.0, 1.0], device=xyz.device) * grid_size
    voxel_indices = bottom_left_idx.unsqueeze(1) + BOX_OFFSETS
    hashed_voxel_indices = hash(voxel_indices, log2_hashmap_size)
    return voxel_min_vertex, voxel_max_vertex, hashed_voxel_indices


class HashEmbedder(nn.Module):
    def __init__(self, bounding_box, n_levels=16, n_features_per_level=2, log2_hashmap_size=19):
        super().__init__()
        self.bounding_box = bounding_box
        self.n_levels, self.log2_hashmap_size = n_levels, log2_hashmap_size
        self.out_dim = n_levels * n_features_per_level
        self.b = math.exp((math.log(FINEST) - math.log(BASE)) / (n_levels - 1))
        self.embeddings = nn.ModuleList(
            [nn.Embedding(2**log2_hashmap_size, n_features_per_level) for _ in range(n_levels)]
        )
        for emb in self.embeddings:
            nn.init.uniform_(emb.weight, a=-0.0001, b=0.0001)

    def trilinear_interp(self, x, voxel_min_vertex, voxel_max_vertex, voxel_embedds):
        weights = (x - voxel_min_vertex) / (voxel_max_vertex - voxel_min_vertex)
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
        return c0 * (1 - weights[:, 2][:, None]) + c1 * weights[:, 2][:, None]

    def forward(self, x):
        x_embedded_all = []
        for i in range(self.n_levels):
            resolution = math.floor(BASE * self.b**i)
            voxel_min_vertex, voxel_max_vertex, hashed_voxel_indices = get_voxel_vertices(
                x, self.bounding_box, resolution, self.log2_hashmap_size
            )
            voxel_embedds = self.embeddings[i](hashed_voxel_indices)
            x_embedded_all.append(self.trilinear_interp(x, voxel_min_vertex, voxel_max_vertex, voxel_embedds))
        return torch.cat(x_embedded_all, dim=-1)


def sh_encode(d):
    x, y, z = d.unbind(-1)
    xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
    return torch.stack(
        [
            torch.full_like(x, 0.28209479177387814),
            -0.48860251190291987 * y,
            0.48860251190291987 * z,
            -0.48860251190291987 * x,
            1.0925484305920792 * xy,
            -1.0925484305920792 * yz,
            0.94617469575755997 * zz - 0.31539156525251999,
            -1.0925484305920792 * xz,
            0.54627421529603959 * xx - 0.54627421529603959 * yy,
            0.59004358992664352 * y * (-3.0 * xx + yy),
            2.8906114426405538 * xy * z,
            0.45704579946446572 * y * (1.0 - 5.0 * zz),
            0.3731763325901154 * z * (5.0 * zz - 3.0),
            0.45704579946446572 * x * (1.0 - 5.0 * zz),
            1.4453057213202769 * z * (xx - yy),
            0.59004358992664352 * x * (-xx + 3.0 * yy),
        ],
        -1,
    )


class NeRFSmall(nn.Module):
    def __init__(self, input_ch, input_ch_views=16, hidden_dim=64, geo_feat_dim=15, hidden_dim_color=64):
        super().__init__()
        self.sigma_net = nn.ModuleList(
            [nn.Linear(input_ch, hidden_dim, bias=False), nn.Linear(hidden_dim, 1 + geo_feat_dim, bias=False)]
        )
        self.color_net = nn.ModuleList(
            [
                nn.Linear(input_ch_views + geo_feat_dim, hidden_dim_color, bias=False),
                nn.Linear(hidden_dim_color, hidden_dim_color, bias=False),
                nn.Linear(hidden_dim_color, 3, bias=False),
            ]
        )

    def density(self, h):
        for i, layer in enumerate(self.sigma_net):
            h = layer(h)
            if i != len(self.sigma_net) - 1:
                h = F.relu(h, inplace=True)
        return h

    def forward(self, x):
        input_pts, input_views = torch.split(x, [x.shape[-1] - 16, 16], dim=-1)
        h = self.density(input_pts)
        sigma, geo_feat = h[..., 0], h[..., 1:]
        h = torch.cat([input_views, geo_feat], dim=-1)
        for i, layer in enumerate(self.color_net):
            h = layer(h)
            if i != len(self.color_net) - 1:
                h = F.relu(h, inplace=True)
        return torch.cat([h, sigma.unsqueeze(-1)], -1)


bbox = (torch.tensor([-1.5, -1.5, -1.5], device=device), torch.tensor([1.5, 1.5, 1.5], device=device))
embedder = HashEmbedder(bbox, N_LEVELS, N_FEAT, LOG2_T).to(device)
model = NeRFSmall(embedder.out_dim).to(device)
optimizer = torch.optim.Adam(
    [
        {"params": model.parameters(), "weight_decay": 1e-6},
        {"params": embedder.parameters(), "eps": 1e-15},
    ],
    lr=1e-2,
    betas=(0.9, 0.99),
)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
print(f"params {sum(p.numel() for p in embedder.parameters()) + sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def random_rays(n):
    theta = torch.rand(n, device=device) * 2 * math.pi
    origins = torch.stack([4.0 * torch.cos(theta), 4.0 * torch.sin(theta), torch.full_like(theta, 1.0)], -1)
    target = (torch.rand(n, 3, device=device) - 0.5) * 1.0
    dirs = target - origins
    return origins, dirs / dirs.norm(dim=-1, keepdim=True)


def render(rays_o, rays_d, perturb=True):
    n = rays_o.shape[0]
    t_vals = torch.linspace(0.0, 1.0, steps=N_SAMPLES, device=device)
    z_vals = (NEAR * (1.0 - t_vals) + FAR * t_vals).expand([n, N_SAMPLES])
    if perturb:
        mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        upper = torch.cat([mids, z_vals[..., -1:]], -1)
        lower = torch.cat([z_vals[..., :1], mids], -1)
        z_vals = lower + (upper - lower) * torch.rand(z_vals.shape, device=device)
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    pts_flat = pts.reshape(-1, 3)
    dirs_flat = rays_d[:, None].expand(pts.shape).reshape(-1, 3)
    embedded = torch.cat([embedder(pts_flat), sh_encode(dirs_flat)], -1)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        raw = model(embedded)
    raw = raw.float().reshape(n, N_SAMPLES, 4)
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.tensor([1e10], device=device).expand(dists[..., :1].shape)], -1)
    rgb = torch.sigmoid(raw[..., :3])
    sigma = F.relu(raw[..., 3])
    alpha = 1.0 - torch.exp(-sigma * dists)
    trans = torch.cumprod(torch.cat([torch.ones((n, 1), device=device), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    weights = alpha * trans
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    acc_map = torch.sum(weights, -1)
    rgb_map = rgb_map + (1.0 - acc_map[..., None])
    return rgb_map, sigma


for step in range(STEPS):
    rays_o, rays_d = random_rays(N_RAYS)
    target = torch.rand(N_RAYS, 3, device=device)
    rgb_map, sigma = render(rays_o, rays_d)
    img_loss = F.mse_loss(rgb_map, target)
    sparsity_loss = torch.log(1 + 2 * sigma**2).sum(-1).mean()
    loss = img_loss + 1e-10 * sparsity_loss
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(f"step {step} loss {loss.item():.4f} psnr {(-10 * torch.log10(img_loss)).item():.2f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del rgb_map, sigma, img_loss, sparsity_loss, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

density_grid = torch.zeros(GRID**3, device=device)
with torch.no_grad():
    r = torch.arange(GRID, device=device)
    cells = torch.stack(torch.meshgrid(r, r, r, indexing="ij"), -1).reshape(-1, 3)
    for _ in range(2):
        new_grid = torch.empty_like(density_grid)
        for i in range(0, cells.shape[0], QCHUNK):
            c = cells[i : i + QCHUNK]
            xyz = (c.float() + torch.rand(c.shape, device=device)) / GRID * 3.0 - 1.5
            with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
                h = model.density(embedder(xyz))
            new_grid[i : i + QCHUNK] = F.relu(h[:, 0].float())
        density_grid = torch.maximum(density_grid * 0.95, new_grid)
    mean_density = density_grid.mean().clamp(max=0.01)
    bitfield = (density_grid > mean_density).view(GRID, GRID, GRID)
print(f"occupancy {bitfield.float().mean().item():.4f}")
del new_grid, cells, h, xyz, c
if device == "cuda":
    print(f"grid peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    lin = torch.linspace(-1, 1, IMG, device=device)
    u, v = torch.meshgrid(lin, lin, indexing="xy")
    dirs = torch.stack([u * 0.4, v * 0.4, -torch.ones_like(u)], -1).reshape(-1, 3)
    rays_d = dirs / dirs.norm(dim=-1, keepdim=True)
    rays_o = torch.tensor([0.0, 0.0, 4.0], device=device).expand(rays_d.shape)
    chunks = [
        render(rays_o[i : i + CHUNK], rays_d[i : i + CHUNK], perturb=False)[0]
        for i in range(0, rays_d.shape[0], CHUNK)
    ]
    img = torch.cat(chunks, 0).reshape(IMG, IMG, 3)
print(f"render {tuple(img.shape)} mean {img.mean().item():.4f}")
if device == "cuda":
    print(
        f"render allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
