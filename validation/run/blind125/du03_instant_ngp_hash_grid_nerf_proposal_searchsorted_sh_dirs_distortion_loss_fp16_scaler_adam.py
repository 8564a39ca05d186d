"""Instant-NGP style NeRF written by hand: a multiresolution hash grid (16 levels, 2^19 entries of 2
features per level, dense indexing on the coarse levels, the spatial hash of XORed primes on the
fine ones, trilinear interpolation of 8 corners gathered by indexing), a tiny density MLP and a
colour MLP over degree-4 real spherical harmonics of the view direction written out by hand; a
proposal hash grid of 5 levels sampled uniformly along each ray, then fine samples drawn by
inverse-CDF `torch.searchsorted` over its weights, volume rendering by an exclusive `cumprod` of
transmittance, the mip-NeRF 360 distortion loss over pairs of samples; fp16 autocast with
GradScaler, Adam (eps 1e-15), 3 training steps of 8,192 rays, then a 128x128 image rendered in
chunks under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12503)
RAYS, N_PROP, N_FINE = (256, 16, 8) if SMALL else (8192, 64, 48)
LOG2_T, LEVELS = (12, 4) if SMALL else (19, 16)
IMG, CHUNK = (16, 128) if SMALL else (128, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"
PRIMES = (1, 2654435761, 805459861)


class HashGrid(nn.Module):
    def __init__(self, levels, log2_t, feats=2, base=16, finest=2048):
        super().__init__()
        self.t = 2**log2_t
        growth = (finest / base) ** (1 / max(levels - 1, 1))
        self.res = [int(base * growth**i) for i in range(levels)]
        self.table = nn.Parameter(torch.empty(levels, self.t, feats).uniform_(-1e-4, 1e-4))
        corners = torch.tensor([[i >> 2 & 1, i >> 1 & 1, i & 1] for i in range(8)])
        self.register_buffer("corners", corners)

    def forward(self, x):  # x in [0, 1]^3, (N, 3)
        out = []
        for lvl, res in enumerate(self.res):
            pos = x * res
            base = pos.floor().long()
            frac = pos - base
            c = base[:, None] + self.corners  # (N, 8, 3)
            if (res + 1) ** 3 <= self.t:
                idx = c[..., 0] + c[..., 1] * (res + 1) + c[..., 2] * (res + 1) ** 2
            else:
                idx = (c[..., 0] * PRIMES[0]) ^ (c[..., 1] * PRIMES[1]) ^ (c[..., 2] * PRIMES[2])
                idx = idx % self.t
            w = torch.where(self.corners.bool(), frac[:, None], 1 - frac[:, None]).prod(-1)  # (N, 8)
            out.append((self.table[lvl][idx] * w[..., None]).sum(1))
        return torch.cat(out, -1)


def sh_deg4(d):
    x, y, z = d.unbind(-1)
    xx, yy, zz, xy, yz, xz = x * x, y * y, z * z, x * y, y * z, x * z
    return torch.stack(
        [
            torch.full_like(x, 0.28209479),
            -0.48860251 * y,
            0.48860251 * z,
            -0.48860251 * x,
            1.09254843 * xy,
            -1.09254843 * yz,
            0.31539157 * (2 * zz - xx - yy),
            -1.09254843 * xz,
            0.54627421 * (xx - yy),
            -0.59004359 * y * (3 * xx - yy),
            2.89061144 * xy * z,
            -0.45704580 * y * (4 * zz - xx - yy),
            0.37317633 * z * (2 * zz - 3 * xx - 3 * yy),
            -0.45704580 * x * (4 * zz - xx - yy),
            1.44530572 * z * (xx - yy),
            -0.59004359 * x * (xx - 3 * yy),
        ],
        -1,
    )


class NGP(nn.Module):
    def __init__(self):
        super().__init__()
        self.grid = HashGrid(LEVELS, LOG2_T)
        self.sigma = nn.Sequential(nn.Linear(2 * LEVELS, 64), nn.ReLU(), nn.Linear(64, 16))
        self.rgb = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
        self.prop_grid = HashGrid(5, 17, base=16, finest=128)
        self.prop = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))

    def density_prop(self, x):
        return F.softplus(self.prop(self.prop_grid(x))[..., 0].float())

    def forward(self, x, d):
        h = self.sigma(self.grid(x))
        sigma = torch.exp(h[..., 0].float().clamp(max=15))
        rgb = torch.sigmoid(self.rgb(torch.cat([h, sh_deg4(d).to(h.dtype)], -1)))
        return sigma, rgb


def render_weights(sigma, t):
    delta = torch.cat([t[:, 1:] - t[:, :-1], torch.full_like(t[:, :1], 1e10)], -1)
    alpha = 1 - torch.exp(-sigma * delta)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], -1), -1)[:, :-1]
    return alpha * trans


def sample_pdf(bins, weights, n):
    pdf = (weights + 1e-5) / (weights + 1e-5).sum(-1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[:, :1]), torch.cumsum(pdf, -1)], -1)
    u = torch.rand(cdf.shape[0], n, device=cdf.device)
    inds = torch.searchsorted(cdf, u, right=True)
    below, above = (inds - 1).clamp(min=0), inds.clamp(max=cdf.shape[-1] - 1)
    cdf_g = torch.stack([cdf.gather(1, below), cdf.gather(1, above)], -1)
    bins_g = torch.stack([bins.gather(1, below), bins.gather(1, above)], -1)
    denom = (cdf_g[..., 1] - cdf_g[..., 0]).clamp(min=1e-5)
    return bins_g[..., 0] + (u - cdf_g[..., 0]) / denom * (bins_g[..., 1] - bins_g[..., 0])


def render(model, origins, dirs, train):
    near, far = 0.05, 1.0
    t_prop = torch.linspace(near, far, N_PROP, device=origins.device).expand(origins.shape[0], N_PROP)
    if train:
        t_prop = t_prop + torch.rand_like(t_prop) * (far - near) / N_PROP
    pts = (origins[:, None] + dirs[:, None] * t_prop[..., None]).clamp(0, 0.999)
    w_prop = render_weights(model.density_prop(pts.reshape(-1, 3)).reshape(t_prop.shape), t_prop)
    with torch.no_grad():
        t_fine = sample_pdf(t_prop, w_prop[:, 1:].detach(), N_FINE)
    t_all, _ = torch.sort(torch.cat([t_prop, t_fine], -1), -1)
    pts = (origins[:, None] + dirs[:, None] * t_all[..., None]).clamp(0, 0.999)
    d = dirs[:, None].expand_as(pts)
    sigma, rgb = model(pts.reshape(-1, 3), d.reshape(-1, 3))
    w = render_weights(sigma.reshape(t_all.shape), t_all)
    color = (w[..., None] * rgb.reshape(*t_all.shape, 3).float()).sum(1)
    return color, w, t_all, w_prop


def distortion(w, t):
    mid = 0.5 * (t[:, 1:] + t[:, :-1])
    w = w[:, :-1]
    inter = (w[:, :, None] * w[:, None, :] * (mid[:, :, None] - mid[:, None, :]).abs()).sum((1, 2))
    intra = (w**2 * (t[:, 1:] - t[:, :-1])).sum(-1) / 3
    return (inter + intra).mean()


model = NGP().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
scaler = torch.amp.GradScaler("cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    origins = torch.rand(RAYS, 3, device=device) * 0.2 + 0.4
    dirs = F.normalize(torch.randn(RAYS, 3, device=device), dim=-1) * 0.5
    target = torch.rand(RAYS, 3, device=device)
    with torch.autocast("cuda", dtype=torch.float16):
        color, w, t_all, w_prop = render(model, origins, dirs, train=True)
        loss = F.smooth_l1_loss(color, target) + 0.01 * distortion(w.float(), t_all)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del color, w, t_all, w_prop, loss

model.eval()
ys, xs = torch.meshgrid(
    torch.linspace(-1, 1, IMG, device=device), torch.linspace(-1, 1, IMG, device=device), indexing="ij"
)
dirs = F.normalize(torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3), dim=-1) * 0.5
origins = torch.tensor([0.5, 0.5, 0.05], device=device).expand_as(dirs)
image = []
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    for i in range(0, dirs.shape[0], CHUNK):
        image.append(render(model, origins[i : i + CHUNK], dirs[i : i + CHUNK], train=False)[0])
image = torch.cat(image).reshape(IMG, IMG, 3)
if device == "cuda":
    print(
        f"image {tuple(image.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
