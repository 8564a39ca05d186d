"""NeRF as nerf-pytorch (yenchenlin/nerf-pytorch, run_nerf.py and run_nerf_helpers.py) writes it:
an Embedder of sin/cos positional encodings (10 frequencies for the points, 63 features, 4 for the
view directions, 27), two NeRF MLPs (coarse and fine: 8 layers 256 wide with the input skip after
the fifth, a sigma head, a 256-wide feature layer and a 128-wide view branch), rays from a pinhole
camera at random poses, 64 stratified coarse samples a ray, raw2outputs with noise on sigma and the
transmittance by torch.cumprod over 1 - alpha, and 64 fine samples a ray drawn by sample_pdf (the
coarse weights' CDF, torch.rand uniforms, torch.searchsorted(cdf, u, right=True), gathers of the
CDF and bins), the fine MLP over all 128 sorted samples. fp32, Adam (lr 5e-4, betas 0.9/0.999)
over both networks, 4,096 random rays a step, MSE on the coarse and fine colours, 3 steps (each its
own phase), then a 256 x 256 image (65,536 rays) rendered under no_grad in one chunk of 65,536 rays
with the MLPs batchified over 262,144 points (netchunk), deterministic samples; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16201)
if SMALL:
    W, D, N_RAND, N_SAMPLES, N_IMPORTANCE, H_IMG, CHUNK, NETCHUNK, STEPS = 32, 4, 64, 8, 8, 16, 256, 1024, 3
else:
    W, D, N_RAND, N_SAMPLES, N_IMPORTANCE, H_IMG, CHUNK, NETCHUNK, STEPS = (
        256,
        8,
        4096,
        64,
        64,
        256,
        65536,
        262144,
        3,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.create_embedding_fn()

    def create_embedding_fn(self):
        embed_fns = []
        d = self.kwargs["input_dims"]
        out_dim = 0
        if self.kwargs["include_input"]:
            embed_fns.append(lambda x: x)
            out_dim += d
        max_freq = self.kwargs["max_freq_log2"]
        N_freqs = self.kwargs["num_freqs"]
        freq_bands = 2.0 ** torch.linspace(0.0, max_freq, steps=N_freqs)
        for freq in freq_bands:
            for p_fn in self.kwargs["periodic_fns"]:
                embed_fns.append(lambda x, p_fn=p_fn, freq=freq: p_fn(x * freq))
                out_dim += d
        self.embed_fns = embed_fns
        self.out_dim = out_dim

    def embed(self, inputs):
        return torch.cat([fn(inputs) for fn in self.embed_fns], -1)


def get_embedder(multires):
    embed_kwargs = {
        "include_input": True,
        "input_dims": 3,
        "max_freq_log2": multires - 1,
        "num_freqs": multires,
        "log_sampling": True,
        "periodic_fns": [torch.sin, torch.cos],
    }
    embedder_obj = Embedder(**embed_kwargs)
    return (lambda x, eo=embedder_obj: eo.embed(x)), embedder_obj.out_dim


class NeRF(nn.Module):
    def __init__(self, D=8, W=256, input_ch=3, input_ch_views=3, output_ch=4, skips=None):
        if skips is None:
            skips = [4]
        super().__init__()
        self.D, self.W = D, W
        self.input_ch, self.input_ch_views = input_ch, input_ch_views
        self.skips = skips
        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)]
            + [nn.Linear(W, W) if i not in self.skips else nn.Linear(W + input_ch, W) for i in range(D - 1)]
        )
        self.views_linears = nn.ModuleList([nn.Linear(input_ch_views + W, W // 2)])
        self.feature_linear = nn.Linear(W, W)
        self.alpha_linear = nn.Linear(W, 1)
        self.rgb_linear = nn.Linear(W // 2, 3)

    def forward(self, x):
        input_pts, input_views = torch.split(x, [self.input_ch, self.input_ch_views], dim=-1)
        h = input_pts
        for i, _l in enumerate(self.pts_linears):
            h = self.pts_linears[i](h)
            h = F.relu(h)
            if i in self.skips:
                h = torch.cat([input_pts, h], -1)
        alpha = self.alpha_linear(h)
        feature = self.feature_linear(h)
        h = torch.cat([feature, input_views], -1)
        for i, _l in enumerate(self.views_linears):
            h = self.views_linears[i](h)
            h = F.relu(h)
        rgb = self.rgb_linear(h)
        return torch.cat([rgb, alpha], -1)


def batchify(fn, chunk):
    def ret(inputs):
        return torch.cat([fn(inputs[i : i + chunk]) for i in range(0, inputs.shape[0], chunk)], 0)

    return ret


def run_network(inputs, viewdirs, fn, embed_fn, embeddirs_fn, netchunk):
    inputs_flat = torch.reshape(inputs, [-1, inputs.shape[-1]])
    embedded = embed_fn(inputs_flat)
    input_dirs = viewdirs[:, None].expand(inputs.shape)
    input_dirs_flat = torch.reshape(input_dirs, [-1, input_dirs.shape[-1]])
    embedded_dirs = embeddirs_fn(input_dirs_flat)
    embedded = torch.cat([embedded, embedded_dirs], -1)
    outputs_flat = batchify(fn, netchunk)(embedded)
    return torch.reshape(outputs_flat, [*list(inputs.shape[:-1]), outputs_flat.shape[-1]])


def get_rays(H, W, K, c2w):
    i, j = torch.meshgrid(
        torch.linspace(0, W - 1, W, device=c2w.device),
        torch.linspace(0, H - 1, H, device=c2w.device),
        indexing="ij",
    )
    i, j = i.t(), j.t()
    dirs = torch.stack([(i - K[0][2]) / K[0][0], -(j - K[1][2]) / K[1][1], -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., None, :] * c2w[:3, :3], -1)
    rays_o = c2w[:3, -1].expand(rays_d.shape)
    return rays_o, rays_d


def sample_pdf(bins, weights, N_samples, det=False):
    weights = weights + 1e-5
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    if det:
        u = torch.linspace(0.0, 1.0, steps=N_samples, device=cdf.device)
        u = u.expand([*list(cdf.shape[:-1]), N_samples])
    else:
        u = torch.rand([*list(cdf.shape[:-1]), N_samples], device=cdf.device)
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
    samples = bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])
    return samples


def raw2outputs(raw, z_vals, rays_d, raw_noise_std=0.0, white_bkgd=False):
    raw2alpha = lambda raw, dists, act_fn=F.relu: 1.0 - torch.exp(-act_fn(raw) * dists)  # noqa: E731
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.Tensor([1e10]).to(dists.device).expand(dists[..., :1].shape)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    noise = 0.0
    if raw_noise_std > 0.0:
        noise = torch.randn(raw[..., 3].shape, device=raw.device) * raw_noise_std
    alpha = raw2alpha(raw[..., 3] + noise, dists)
    weights = (
        alpha
        * torch.cumprod(
            torch.cat([torch.ones((alpha.shape[0], 1), device=alpha.device), 1.0 - alpha + 1e-10], -1), -1
        )[:, :-1]
    )
    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    depth_map = torch.sum(weights * z_vals, -1)
    disp_map = 1.0 / torch.max(1e-10 * torch.ones_like(depth_map), depth_map / torch.sum(weights, -1))
    acc_map = torch.sum(weights, -1)
    if white_bkgd:
        rgb_map = rgb_map + (1.0 - acc_map[..., None])
    return rgb_map, disp_map, acc_map, weights, depth_map


def render_rays(
    ray_batch, network_fn, network_fine, network_query_fn, N_samples, N_importance, perturb, raw_noise_std
):
    N_rays = ray_batch.shape[0]
    rays_o, rays_d = ray_batch[:, 0:3], ray_batch[:, 3:6]
    viewdirs = ray_batch[:, -3:]
    bounds = torch.reshape(ray_batch[..., 6:8], [-1, 1, 2])
    near, far = bounds[..., 0], bounds[..., 1]
    t_vals = torch.linspace(0.0, 1.0, steps=N_samples, device=ray_batch.device)
    z_vals = near * (1.0 - t_vals) + far * (t_vals)
    z_vals = z_vals.expand([N_rays, N_samples])
    if perturb > 0.0:
        mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        upper = torch.cat([mids, z_vals[..., -1:]], -1)
        lower = torch.cat([z_vals[..., :1], mids], -1)
        t_rand = torch.rand(z_vals.shape, device=z_vals.device)
        z_vals = lower + (upper - lower) * t_rand
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    raw = network_query_fn(pts, viewdirs, network_fn)
    rgb_map, disp_map, acc_map, weights, _ = raw2outputs(raw, z_vals, rays_d, raw_noise_std)
    rgb_map_0 = rgb_map
    z_vals_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
    z_samples = sample_pdf(z_vals_mid, weights[..., 1:-1], N_importance, det=(perturb == 0.0))
    z_samples = z_samples.detach()
    z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
    raw = network_query_fn(pts, viewdirs, network_fine)
    rgb_map, disp_map, acc_map, weights, _depth_map = raw2outputs(raw, z_vals, rays_d, raw_noise_std)
    return {"rgb_map": rgb_map, "disp_map": disp_map, "acc_map": acc_map, "rgb0": rgb_map_0}


def batchify_rays(rays_flat, chunk, **kwargs):
    all_ret = {}
    for i in range(0, rays_flat.shape[0], chunk):
        ret = render_rays(rays_flat[i : i + chunk], **kwargs)
        for k in ret:
            all_ret.setdefault(k, []).append(ret[k])
    return {k: torch.cat(all_ret[k], 0) for k in all_ret}


def pose_spherical(theta, phi, radius):
    th, ph = torch.tensor(theta), torch.tensor(phi)
    trans = torch.tensor([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, radius], [0, 0, 0, 1]], dtype=torch.float32)
    rot_phi = torch.tensor(
        [
            [1, 0, 0, 0],
            [0, torch.cos(ph), -torch.sin(ph), 0],
            [0, torch.sin(ph), torch.cos(ph), 0],
            [0, 0, 0, 1],
        ]
    )
    rot_theta = torch.tensor(
        [
            [torch.cos(th), 0, -torch.sin(th), 0],
            [0, 1, 0, 0],
            [torch.sin(th), 0, torch.cos(th), 0],
            [0, 0, 0, 1],
        ]
    )
    return rot_theta @ rot_phi @ trans


def make_rays(rays_o, rays_d, near=2.0, far=6.0):
    viewdirs = rays_d / torch.norm(rays_d, dim=-1, keepdim=True)
    near_t = near * torch.ones_like(rays_d[..., :1])
    far_t = far * torch.ones_like(rays_d[..., :1])
    return torch.cat([rays_o, rays_d, near_t, far_t, viewdirs], -1)


embed_fn, input_ch = get_embedder(10)
embeddirs_fn, input_ch_views = get_embedder(4)
model = NeRF(D=D, W=W, input_ch=input_ch, input_ch_views=input_ch_views).to(device)
model_fine = NeRF(D=D, W=W, input_ch=input_ch, input_ch_views=input_ch_views).to(device)
grad_vars = list(model.parameters()) + list(model_fine.parameters())
optimizer = torch.optim.Adam(params=grad_vars, lr=5e-4, betas=(0.9, 0.999))
network_query_fn = lambda inputs, viewdirs, network_fn: run_network(  # noqa: E731
    inputs, viewdirs, network_fn, embed_fn=embed_fn, embeddirs_fn=embeddirs_fn, netchunk=NETCHUNK
)
focal = 0.5 * H_IMG / 0.4
K = torch.tensor([[focal, 0, 0.5 * H_IMG], [0, focal, 0.5 * H_IMG], [0, 0, 1]])
images = torch.rand(STEPS, H_IMG, H_IMG, 3, device=device)
poses = [pose_spherical(float(a), -30.0, 4.0).to(device) for a in torch.linspace(-180, 180, STEPS + 1)[:-1]]
render_kwargs = dict(
    network_fn=model,
    network_fine=model_fine,
    network_query_fn=network_query_fn,
    N_samples=N_SAMPLES,
    N_importance=N_IMPORTANCE,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

img2mse = lambda x, y: torch.mean((x - y) ** 2)  # noqa: E731
mse2psnr = lambda x: -10.0 * torch.log(x) / torch.log(torch.Tensor([10.0]).to(x.device))  # noqa: E731
for step in range(STEPS):
    rays_o, rays_d = get_rays(H_IMG, H_IMG, K, poses[step])
    coords = torch.stack(
        torch.meshgrid(
            torch.linspace(0, H_IMG - 1, H_IMG, device=device),
            torch.linspace(0, H_IMG - 1, H_IMG, device=device),
            indexing="ij",
        ),
        -1,
    )
    coords = torch.reshape(coords, [-1, 2])
    select_inds = torch.randperm(coords.shape[0], device=device)[:N_RAND]
    select_coords = coords[select_inds].long()
    rays_o = rays_o[select_coords[:, 0], select_coords[:, 1]]
    rays_d = rays_d[select_coords[:, 0], select_coords[:, 1]]
    target_s = images[step][select_coords[:, 0], select_coords[:, 1]]
    rays = make_rays(rays_o, rays_d)
    ret = batchify_rays(rays, CHUNK, perturb=1.0, raw_noise_std=1.0, **render_kwargs)
    optimizer.zero_grad()
    img_loss = img2mse(ret["rgb_map"], target_s)
    loss = img_loss + img2mse(ret["rgb0"], target_s)
    psnr = mse2psnr(img_loss)
    loss.backward()
    optimizer.step()
    decay_steps = 250 * 1000
    new_lrate = 5e-4 * (0.1 ** ((step + 1) / decay_steps))
    for param_group in optimizer.param_groups:
        param_group["lr"] = new_lrate
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} psnr {psnr.item():.2f}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del ret, loss, img_loss, psnr, rays, target_s
with torch.no_grad():
    rays_o, rays_d = get_rays(H_IMG, H_IMG, K, pose_spherical(45.0, -30.0, 4.0).to(device))
    rays = make_rays(rays_o.reshape(-1, 3), rays_d.reshape(-1, 3))
    ret = batchify_rays(rays, CHUNK, perturb=0.0, raw_noise_std=0.0, **render_kwargs)
    rgb = ret["rgb_map"].reshape(H_IMG, H_IMG, 3)
    disp = ret["disp_map"].reshape(H_IMG, H_IMG)
    rgb8 = (255 * torch.clamp(rgb, 0, 1)).to(torch.uint8)
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"render {tuple(rgb8.shape)} disp {disp.mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
