"""Instant-NGP by hand (Mueller et al. 2022): a multiresolution hash grid encoding (16 levels, 2**19
entries of 2 features each, spatial hash of the integer corner coordinates with the paper's primes and
XOR on int64, trilinear interpolation of the 8 corners) feeding a tiny density MLP and a colour MLP
conditioned on a hand-written spherical-harmonics-free direction encoding (frequency encoding).
Rays of a synthetic scene (a coloured ball) are rendered by volume rendering with uniform stratified
samples, alpha = 1 - exp(-sigma * delta) and transmittance from an exclusive cumprod. The MLPs run under
fp16 autocast with a GradScaler; Adam with eps=1e-15 as in the paper.

Phases: 0 hash tables, MLPs and ray generator built; 1 training steps on batches of 8192 rays x 64
samples; 2 a full 256x256 image rendered in chunks under no_grad; 3 the 128**3 occupancy grid
refreshed from densities at jittered cell centres under inference_mode, thresholded and counted."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda"


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class HashGrid(nn.Module):
    PRIMES = (1, 2654435761, 805459861)

    def __init__(self, levels=16, log2_size=19, feats=2, base=16, finest=2048):
        super().__init__()
        self.levels, self.size, self.feats = levels, 2**log2_size, feats
        b = math.exp((math.log(finest) - math.log(base)) / (levels - 1))
        self.register_buffer("res", torch.tensor([math.floor(base * b**i) for i in range(levels)]))
        self.tables = nn.Parameter(torch.empty(levels, self.size, feats).uniform_(-1e-4, 1e-4))
        offs = torch.tensor([[i >> 2 & 1, i >> 1 & 1, i & 1] for i in range(8)])
        self.register_buffer("offsets", offs)

    def forward(self, x):  # x in [0, 1]^3, shape (N, 3)
        n = x.shape[0]
        pos = x[:, None, :] * self.res[None, :, None].float()  # N, L, 3
        pos0 = pos.floor().long()
        frac = pos - pos0.float()
        corners = pos0[:, :, None, :] + self.offsets[None, None]  # N, L, 8, 3
        h = corners[..., 0] * self.PRIMES[0]
        h = torch.bitwise_xor(h, corners[..., 1] * self.PRIMES[1])
        h = torch.bitwise_xor(h, corners[..., 2] * self.PRIMES[2])
        idx = h % self.size  # N, L, 8
        lvl = torch.arange(self.levels, device=x.device)[None, :, None] * self.size
        feats = self.tables.view(-1, self.feats)[(idx + lvl).view(-1)].view(n, self.levels, 8, -1)
        w = torch.where(self.offsets[None, None].bool(), frac[:, :, None, :], 1 - frac[:, :, None, :])
        w = w.prod(-1, keepdim=True)  # N, L, 8, 1
        return (feats * w).sum(2).reshape(n, -1)


def freq_encode(d, n=4):
    out = [d]
    for i in range(n):
        out += [torch.sin(2**i * math.pi * d), torch.cos(2**i * math.pi * d)]
    return torch.cat(out, -1)


class NGP(nn.Module):
    def __init__(self):
        super().__init__()
        self.grid = HashGrid()
        self.sigma_net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
        self.color_net = nn.Sequential(
            nn.Linear(16 + 27, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3)
        )

    def forward(self, x, d):
        h = self.sigma_net(self.grid(x))
        sigma = F.softplus(h[:, 0].float() - 1.0)
        rgb = torch.sigmoid(self.color_net(torch.cat([h, freq_encode(d).to(h.dtype)], -1)).float())
        return sigma, rgb


def scene_color(p):  # ground truth: a ball of radius 0.3 with position-dependent colour
    inside = ((p - 0.5).norm(dim=-1) < 0.3).float()
    return inside[..., None] * torch.stack([p[..., 0], 1 - p[..., 1], p[..., 2]], -1)


def render(model, origins, dirs, n_samples=64, stratified=True):
    n = origins.shape[0]
    t = torch.linspace(0.0, 1.0, n_samples + 1, device=device)[:-1].expand(n, n_samples)
    if stratified:
        t = t + torch.rand(n, n_samples, device=device) / n_samples
    else:
        t = t + 0.5 / n_samples
    pts = (origins[:, None] + t[..., None] * dirs[:, None]).clamp(0, 1)
    with torch.autocast("cuda", dtype=torch.float16):
        sigma, rgb = model(pts.view(-1, 3), dirs[:, None].expand(-1, n_samples, -1).reshape(-1, 3))
    sigma, rgb = sigma.view(n, n_samples), rgb.view(n, n_samples, 3)
    delta = torch.full_like(t, 1.0 / n_samples)
    alpha = 1 - torch.exp(-sigma * delta)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], -1), -1)[:, :-1]
    weights = alpha * trans
    return (weights[..., None] * rgb).sum(1), weights.sum(1), pts, weights


def rays(n):
    origins = torch.rand(n, 3, device=device) * torch.tensor([1.0, 1.0, 0.0], device=device)
    dirs = F.normalize(
        torch.randn(n, 3, device=device) * 0.1 + torch.tensor([0.0, 0.0, 1.0], device=device), dim=-1
    )
    return origins, dirs


model = NGP().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
scaler = torch.amp.GradScaler("cuda")
report("phase0 build")

for step in range(12):
    o, d = rays(8192)
    with torch.no_grad():
        _, _, pts, _ = render(model, o, d)
        target = scene_color(pts).mean(1)  # cheap synthetic target colour per ray
    color, acc, _, _ = render(model, o, d)
    loss = F.mse_loss(color, target) + 1e-3 * acc.mean()
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print("train loss", loss.item())
report("phase1 train")

H = W = 256
ys, xs = torch.meshgrid(
    torch.linspace(0, 1, H, device=device), torch.linspace(0, 1, W, device=device), indexing="ij"
)
origins = torch.stack([xs, ys, torch.zeros_like(xs)], -1).view(-1, 3)
dirs = torch.tensor([0.0, 0.0, 1.0], device=device).expand_as(origins).contiguous()
image = []
with torch.no_grad():
    for o, d in zip(origins.split(8192), dirs.split(8192)):
        image.append(render(model, o, d, n_samples=128, stratified=False)[0])
image = torch.cat(image).view(H, W, 3)
print("image mean", image.mean().item())
report("phase2 render")

G = 128
with torch.inference_mode():
    cells = torch.stack(torch.meshgrid(*[torch.arange(G, device=device)] * 3, indexing="ij"), -1).view(-1, 3)
    dens = torch.empty(cells.shape[0], device=device)
    for i in range(0, cells.shape[0], 2**18):
        c = cells[i : i + 2**18]
        x = (c.float() + torch.rand_like(c, dtype=torch.float)) / G
        with torch.autocast("cuda", dtype=torch.float16):
            h = model.sigma_net(model.grid(x))
        dens[i : i + 2**18] = F.softplus(h[:, 0].float() - 1.0)
    occ = (dens > 0.01 * dens.mean()).view(G, G, G)
print("occupied cells", int(occ.sum()))
report("phase3 occupancy")
