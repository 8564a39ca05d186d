"""Vanilla NeRF after Mildenhall et al. 2020 and the yenchenlin/nerf-pytorch repository, written by
hand: a Lego-shaped scene (synthetic 400 x 400 half-resolution images, focal 555, random camera poses on
a sphere), `get_rays` by meshgrid, the positional encoding of points (10 frequencies, 63 features) and of
view directions (4 frequencies, 27 features), coarse and fine MLPs of 8 layers of 256 with the skip at
layer 4 and the view-dependent branch (alpha, feature, a 128-wide view layer, rgb), `run_network`
batched in chunks of 65,536 points and concatenated, stratified sampling (64 coarse samples per ray,
perturbed by `torch.rand`), hierarchical importance sampling of 128 fine samples (`sample_pdf`: cumsum,
searchsorted with right=True, gather of the expanded cdf and bins), volume rendering by alpha
compositing (exclusive cumprod of 1 - alpha, raw noise 1.0 on the density), MSE of the coarse and fine
maps. fp32, Adam (lr 5e-4, the coarse and the fine network as two parameter groups) with the
repository's per-step exponential decay written into each group's lr; 4,096 rays per batch; the first
step its own phase, then 3 steps; then a full 400 x 400 image rendered under no_grad in chunks of
16,384 rays (coarse + fine, rgb/disp/acc maps gathered on the device); then 2 steps at 8,192 rays
per batch; 4 phases after the setup."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17701)
if SMALL:
    H = W = 16
    N_RAND, N_SAMPLES, N_IMPORTANCE, NETCHUNK, CHUNK, WIDTH, STEPS, BIG_RAND = 64, 8, 16, 512, 128, 32, 2, 128
else:
    H = W = 400
    N_RAND, N_SAMPLES, N_IMPORTANCE, NETCHUNK, CHUNK, WIDTH, STEPS, BIG_RAND = (
        4096,
        64,
        128,
        65536,
        16384,
        256,
        4,
        8192,
    )
FOCAL = 555.555 * H / 400
NEAR, FAR = 2.0, 6.0
LRATE, DECAY_STEPS = 5e-4, 250 * 1000
device = "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    def __init__(self, multires, input_dims=3):
        self.freq_bands = 2.0 ** torch.linspace(0.0, multires - 1, steps=multires)
        self.out_dim = input_dims * (1 + 2 * multires)

    def __call__(self, inputs):
        out = [inputs]
        for freq in self.freq_bands:
            for p_fn in (torch.sin, torch.cos):
                out.append(p_fn(inputs * freq))
        return torch.cat(out, -1)


class NeRF(nn.Module):
    def __init__(self, D=8, W=256, input_ch=63, input_ch_views=27, skips=(4,)):
        super().__init__()
        self.input_ch, self.input_ch_views, self.skips = input_ch, input_ch_views, skips
        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)]
            + [nn.Linear(W, W) if i not in skips else nn.Linear(W + input_ch, W) for i in range(D - 1)]
        )
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W // 2)])
        self.feature_linear = nn.Linear(W, W)
        self.alpha_linear = nn.Linear(W, 1)
        self.rgb_linear = nn.Linear(W // 2, 3)

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = input_pts
        for i, layer in enumerate(self.pts_linears):
            h = F.relu(layer(h))
            if i in self.skips:
                h = torch.cat([input_pts, h], -1)
        alpha = self.alpha_linear(h)
        feature = self.feature_linear(h)
        h = torch.cat([feature, input_views], -1)
        for layer in self.views_linears:
            h = F.relu(layer(h))
        rgb = self.rgb_linear(h)
        return torch.cat([rgb, alpha], -1)


embed_fn, embeddirs_fn = Embedder(10), Embedder(4)


def run_network(inputs, viewdirs, fn, netchunk=NETCHUNK):
    inputs_flat = torch.reshape(inputs, [-1, inputs.shape[-1]])
    embedded = embed_fn(inputs_flat)
    input_dirs = viewdirs[:, None].expand(inputs.shape)
    input_dirs_flat = torch.reshape(input_dirs, [-1, input_dirs.shape[-1]])
    embedded = torch.cat([embedded, embeddirs_fn(input_dirs_flat)], -1)
    outputs_flat = torch.cat(
        [fn(embedded[i : i + netchunk]) for i in range(0, embedded.shape[0], netchunk)], 0
    )
    return torch.reshape(outputs_flat, [*inputs.shape[:-1], outputs_flat.shape[-1]])


def raw2outputs(raw, z_vals, rays_d, raw_noise_std=0.0):
    raw2alpha = lambda raw, dists, act_fn=F.relu: 1.0 - torch.exp(-act_fn(raw) * dists)  # noqa: E731
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.tensor([1e10], device=z_vals.device).expand(dists[..., :1].shape)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    noise = torch.randn(raw[..., 3].shape, device=raw.device) * raw_noise_std if raw_noise_std > 0 else 0.0
    alpha = raw2alpha(raw[..., 3] + noise, dists)
    ones = torch.ones((alpha.shape[0], 1), device=alpha.device)
    weights = alpha * torch.cumprod(torch.cat([ones, 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    depth_map = torch.sum(weights * z_vals, -1)
    acc_map = torch.sum(weights, -1)
    disp_map = 1.0 / torch.max(1e-10 * torch.ones_like(depth_map), depth_map / acc_map)
    rgb_map = rgb_map + (1.0 - acc_map[..., None])
    return rgb_map, disp_map, acc_map, weights, depth_map


def sample_pdf(bins, weights, N_samples, det=False):
    weights = weights + 1e-5
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    if det:
        u = torch.linspace(0.0, 1.0, steps=N_samples, device=bins.device)
        u = u.expand([*cdf.shape[:-1], N_samples])
    else:
        u = torch.rand([*cdf.shape[:-1], N_samples], device=bins.device)
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)
    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


def render_rays(rays_o, rays_d, viewdirs, coarse, fine, perturb=1.0, raw_noise_std=0.0):
    n = rays_o.shape[0]
    t_vals = torch.linspace(0.0, 1.0, steps=N_SAMPLES, device=rays_o.device)
    z_vals = (NEAR * (1.0 - t_vals) + FAR * t_vals).expand([n, N_SAMPLES])
    if perturb > 0.0:
        mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        upper = torch.cat([mids, z_vals[..., -1:]], -1)
        lower = torch.cat([z_vals[..., :1], mids], -1)
        t_rand = torch.rand(z_vals.shape, device=rays_o.device)
        z_vals = lower + (upper - lower) * t_rand
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    raw = run_network(pts, viewdirs, coarse)
    rgb_map_0, _, _, weights, _ = raw2outputs(raw, z_vals, rays_d, raw_noise_std)
    z_vals_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    z_samples = sample_pdf(z_vals_mid, weights[..., 1:-1], N_IMPORTANCE, det=(perturb == 0.0))
    z_samples = z_samples.detach()
    z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    raw = run_network(pts, viewdirs, fine)
    rgb_map, disp_map, acc_map, _, _ = raw2outputs(raw, z_vals, rays_d, raw_noise_std)
    return {"rgb_map": rgb_map, "disp_map": disp_map, "acc_map": acc_map, "rgb0": rgb_map_0}


def pose_spherical(theta, phi, radius):
    th, ph = math.radians(theta), math.radians(phi)
    trans = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, radius], [0, 0, 0, 1]], dtype=torch.float32)
    rot_phi = torch.tensor(
        [[1, 0, 0, 0], [0, math.cos(ph), -math.sin(ph), 0], [0, math.sin(ph), math.cos(ph), 0], [0, 0, 0, 1]]
    )
    rot_theta = torch.tensor(
        [[math.cos(th), 0, -math.sin(th), 0], [0, 1, 0, 0], [math.sin(th), 0, math.cos(th), 0], [0, 0, 0, 1]]
    )
    c2w = rot_theta @ rot_phi @ trans
    return torch.tensor([[-1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.float32) @ c2w


def get_rays(c2w):
    i, j = torch.meshgrid(
        torch.linspace(0, W - 1, W, device=device), torch.linspace(0, H - 1, H, device=device), indexing="ij"
    )
    i, j = i.t(), j.t()
    dirs = torch.stack([(i - W * 0.5) / FOCAL, -(j - H * 0.5) / FOCAL, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., None, :] * c2w[:3, :3], -1)
    rays_o = c2w[:3, -1].expand(rays_d.shape)
    return rays_o, rays_d


def rays_for(rays_o, rays_d):
    viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
    return rays_o.reshape(-1, 3), rays_d.reshape(-1, 3), viewdirs.reshape(-1, 3)


images = torch.rand(8, H, W, 3, device=device)
poses = [pose_spherical(float(a), -30.0, 4.0).to(device) for a in torch.linspace(-180, 180, 9)[:-1]]

coarse = NeRF(W=WIDTH).to(device)
fine = NeRF(W=WIDTH).to(device)
optimizer = torch.optim.Adam(
    [{"params": coarse.parameters()}, {"params": fine.parameters()}], lr=LRATE, betas=(0.9, 0.999)
)
print(f"params {sum(p.numel() for p in coarse.parameters()) * 2}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(global_step, n_rand):
    img_i = int(torch.randint(0, len(poses), ()).item())
    target = images[img_i]
    rays_o, rays_d = get_rays(poses[img_i])
    coords = torch.stack(
        torch.meshgrid(torch.arange(H, device=device), torch.arange(W, device=device), indexing="ij"), -1
    ).reshape(-1, 2)
    select_inds = torch.randint(0, coords.shape[0], (n_rand,), device=device)
    select_coords = coords[select_inds].long()
    ro = rays_o[select_coords[:, 0], select_coords[:, 1]]
    rd = rays_d[select_coords[:, 0], select_coords[:, 1]]
    target_s = target[select_coords[:, 0], select_coords[:, 1]]
    ro, rd, vd = rays_for(ro, rd)
    out = render_rays(ro, rd, vd, coarse, fine, perturb=1.0, raw_noise_std=1.0)
    optimizer.zero_grad()
    img_loss = torch.mean((out["rgb_map"] - target_s) ** 2)
    loss = img_loss + torch.mean((out["rgb0"] - target_s) ** 2)
    psnr = -10.0 * torch.log(img_loss) / math.log(10.0)
    loss.backward()
    optimizer.step()
    new_lrate = LRATE * (0.1 ** (global_step / DECAY_STEPS))
    for param_group in optimizer.param_groups:
        param_group["lr"] = new_lrate
    return loss.item(), psnr.item()


for step in range(STEPS):
    loss, psnr = train_step(step, N_RAND)
    print(f"step {step} loss {loss:.4f} psnr {psnr:.2f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    rays_o, rays_d = get_rays(pose_spherical(30.0, -30.0, 4.0).to(device))
    ro, rd, vd = rays_for(rays_o, rays_d)
    all_ret = {}
    for i in range(0, ro.shape[0], CHUNK):
        ret = render_rays(ro[i : i + CHUNK], rd[i : i + CHUNK], vd[i : i + CHUNK], coarse, fine, perturb=0.0)
        for k in ("rgb_map", "disp_map", "acc_map"):
            all_ret.setdefault(k, []).append(ret[k])
    all_ret = {k: torch.cat(v, 0) for k, v in all_ret.items()}
    rgb = all_ret["rgb_map"].reshape(H, W, 3)
    disp = all_ret["disp_map"].reshape(H, W)
    rgb8 = (255 * torch.clip(rgb, 0, 1)).to(torch.uint8)
print(f"render {tuple(rgb8.shape)} disp mean {disp.mean().item():.3f}")
del all_ret, ret, rgb, disp
if device == "cuda":
    print(f"render peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS, STEPS + 2):
    loss, psnr = train_step(step, BIG_RAND)
    print(f"big step {step} loss {loss:.4f} psnr {psnr:.2f}")
if device == "cuda":
    print(
        f"big allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
