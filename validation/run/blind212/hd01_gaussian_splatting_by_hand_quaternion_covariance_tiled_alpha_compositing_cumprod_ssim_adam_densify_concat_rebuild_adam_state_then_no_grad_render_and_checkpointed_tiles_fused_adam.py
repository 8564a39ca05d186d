"""3-D Gaussian splatting by hand (Kerbl et al. 2023) fitted to random target views.

Per-Gaussian parameters are leaf tensors (means, log-scales, quaternions, opacity logits, degree-1 spherical
harmonics colours). Every step: 3-D covariance R S S^T R^T from the normalised quaternion and the scales, the
EWA projection through a pinhole camera (Jacobian of the perspective map, 2-D covariance + 0.3 px, its conic),
a depth sort (argsort + gather), and a differentiable rasterizer written with tensor ops: the image is cut into
32 x 32 tiles and for every tile every Gaussian's Gaussian falloff, alpha (clamped at 0.99), transmittance by
an exclusive cumprod over the depth-sorted Gaussians and the weighted colour sum are computed densely.
Loss 0.8 L1 + 0.2 (1 - SSIM) with an 11 x 11 Gaussian window (depthwise conv2d).

Phases: 3 steps of Adam at 128 x 128 with 8,192 Gaussians (means2d.retain_grad() accumulates the view-space
gradient); densification: the 2,048 Gaussians with the largest accumulated gradient cloned (topk), the
parameters concatenated into new leaf tensors and Adam's state rebuilt by hand (exp_avg / exp_avg_sq
concatenated with zeros), then 3 more steps; a render of 4 views at 256 x 256 under no_grad; then
empty_cache() and 2 steps at 256 x 256 with every tile under torch.utils.checkpoint (non-reentrant) and a
fresh fused Adam. 4 phases."""

import math
import os

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2121)
N0, RES, BIG, TILE, NCLONE = (512, 32, 64, 16, 128) if SMALL else (8192, 128, 256, 32, 2048)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def leaf(t):
    return t.detach().clone().requires_grad_(True)


params = {
    "means": leaf(torch.randn(N0, 3, device=device) * 0.6),
    "log_scales": leaf(torch.full((N0, 3), math.log(0.03), device=device) + 0.1 * torch.randn(N0, 3, device=device)),
    "quats": leaf(torch.randn(N0, 4, device=device)),
    "opacity": leaf(torch.full((N0, 1), -1.0, device=device)),
    "sh": leaf(torch.randn(N0, 4, 3, device=device) * 0.2),
}
lrs = {"means": 1.6e-4, "log_scales": 5e-3, "quats": 1e-3, "opacity": 5e-2, "sh": 2.5e-3}


def make_opt(fused=False):
    groups = [{"params": [params[k]], "lr": lrs[k], "name": k} for k in params]
    return torch.optim.Adam(groups, eps=1e-15, fused=fused or None)


def quat_to_rot(q):
    q = F.normalize(q, dim=-1)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
            2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
            2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
        ],
        dim=-1,
    ).view(-1, 3, 3)


def camera(seed, res):
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(2, generator=g) * 2 * math.pi
    ca, sa, cb, sb = math.cos(angle[0]), math.sin(angle[0]), math.cos(angle[1] * 0.3), math.sin(angle[1] * 0.3)
    rot_y = torch.tensor([[ca, 0, sa], [0, 1, 0], [-sa, 0, ca]])
    rot_x = torch.tensor([[1, 0, 0], [0, cb, -sb], [0, sb, cb]])
    view = (rot_x @ rot_y).to(device)
    trans = torch.tensor([0.0, 0.0, 4.0], device=device)
    focal = 1.2 * res
    return view, trans, focal


def project(p, view, trans, focal, res):
    cam = p["means"] @ view.T + trans
    z = cam[:, 2:3].clamp(min=0.2)
    means2d = focal * cam[:, :2] / z + res / 2
    rot = quat_to_rot(p["quats"])
    scales = torch.exp(p["log_scales"])
    m = rot * scales[:, None, :]
    cov3d = m @ m.transpose(1, 2)
    zeros = torch.zeros_like(z)
    jac = torch.cat(
        [focal / z, zeros, -focal * cam[:, 0:1] / (z * z), zeros, focal / z, -focal * cam[:, 1:2] / (z * z)], dim=1
    ).view(-1, 2, 3)
    t = jac @ view
    cov2d = t @ cov3d @ t.transpose(1, 2) + 0.3 * torch.eye(2, device=device)
    a, b, c = cov2d[:, 0, 0], cov2d[:, 0, 1], cov2d[:, 1, 1]
    det = (a * c - b * b).clamp(min=1e-8)
    conic = torch.stack([c / det, -b / det, a / det], dim=-1)
    dirs = F.normalize(p["means"] - (-view.T @ trans), dim=-1)
    basis = torch.cat([torch.full_like(dirs[:, :1], 0.282095), -0.488603 * dirs[:, 1:2], 0.488603 * dirs[:, 2:3],
                       -0.488603 * dirs[:, 0:1]], dim=1)
    colors = torch.sigmoid((basis[:, :, None] * p["sh"]).sum(1))
    opacity = torch.sigmoid(p["opacity"]).squeeze(1)
    order = torch.argsort(z.squeeze(1))
    return means2d, means2d[order], conic[order], opacity[order], colors[order]


def render_tile(pix, means2d, conic, opacity, colors):
    d = pix[:, None, :] - means2d[None]
    power = -0.5 * (conic[:, 0] * d[..., 0] ** 2 + conic[:, 2] * d[..., 1] ** 2) - conic[:, 1] * d[..., 0] * d[..., 1]
    alpha = (opacity * torch.exp(power.clamp(max=0.0))).clamp(max=0.99)
    trans = torch.cumprod(1 - alpha, dim=1)
    trans = torch.cat([torch.ones_like(trans[:, :1]), trans[:, :-1]], dim=1)
    return (alpha * trans) @ colors


def rasterize(sorted_, res, use_ckpt=False):
    ys, xs = torch.meshgrid(torch.arange(res, device=device), torch.arange(res, device=device), indexing="ij")
    pix = torch.stack([xs, ys], -1).float() + 0.5
    rows = []
    for ty in range(0, res, TILE):
        cols = []
        for tx in range(0, res, TILE):
            tp = pix[ty : ty + TILE, tx : tx + TILE].reshape(-1, 2)
            if use_ckpt:
                out = checkpoint(render_tile, tp, *sorted_, use_reentrant=False)
            else:
                out = render_tile(tp, *sorted_)
            cols.append(out.view(TILE, TILE, 3))
        rows.append(torch.cat(cols, dim=1))
    return torch.cat(rows, dim=0).permute(2, 0, 1)


def ssim(x, y):
    g = torch.exp(-((torch.arange(11, device=device) - 5.0) ** 2) / (2 * 1.5**2))
    w = (g[:, None] * g[None, :]) / g.sum() ** 2
    w = w.expand(3, 1, 11, 11).contiguous()
    x, y = x[None], y[None]
    mx, my = F.conv2d(x, w, padding=5, groups=3), F.conv2d(y, w, padding=5, groups=3)
    sxx = F.conv2d(x * x, w, padding=5, groups=3) - mx * mx
    syy = F.conv2d(y * y, w, padding=5, groups=3) - my * my
    sxy = F.conv2d(x * y, w, padding=5, groups=3) - mx * my
    c1, c2 = 0.01**2, 0.03**2
    return (((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx * mx + my * my + c1) * (sxx + syy + c2))).mean()


targets = {}


def target(seed, res):
    if (seed, res) not in targets:
        targets[(seed, res)] = torch.rand(3, res, res, device=device)
    return targets[(seed, res)]


grad_accum = torch.zeros(N0, device=device)


def train_step(opt, step, res, use_ckpt=False):
    global grad_accum
    view, trans, focal = camera(step, res)
    means2d, *sorted_ = project(params, view, trans, focal, res)
    means2d.retain_grad()
    sorted_[0].retain_grad()
    img = rasterize(sorted_, res, use_ckpt)
    gt = target(step % 4, res)
    loss = 0.8 * (img - gt).abs().mean() + 0.2 * (1 - ssim(img, gt))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        grad_accum += means2d.grad.norm(dim=-1)
    opt.step()
    return loss.item()


opt = make_opt()
for step in range(3):
    loss = train_step(opt, step, RES)
print(f"train loss {loss:.4f} gaussians {params['means'].shape[0]}")
report("train")

# densify: clone the Gaussians with the largest accumulated view-space gradient, rebuild Adam's state
with torch.no_grad():
    idx = torch.topk(grad_accum, NCLONE).indices
    new_params = {}
    for group in opt.param_groups:
        name = group["name"]
        old = group["params"][0]
        extra = old[idx].clone()
        if name == "means":
            extra += torch.randn_like(extra) * torch.exp(params["log_scales"][idx])
        new = leaf(torch.cat([old, extra], dim=0))
        state = opt.state.pop(old)
        state["exp_avg"] = torch.cat([state["exp_avg"], torch.zeros_like(extra)], dim=0)
        state["exp_avg_sq"] = torch.cat([state["exp_avg_sq"], torch.zeros_like(extra)], dim=0)
        opt.state[new] = state
        group["params"][0] = new
        new_params[name] = new
    params.update(new_params)
    del new_params, old, new, state, extra
    grad_accum = torch.zeros(params["means"].shape[0], device=device)
for step in range(3, 6):
    loss = train_step(opt, step, RES)
print(f"densified loss {loss:.4f} gaussians {params['means'].shape[0]}")
report("densify")

with torch.no_grad():
    psnrs = []
    for v in range(4):
        view, trans, focal = camera(100 + v, BIG)
        _, *sorted_ = project(params, view, trans, focal, BIG)
        img = rasterize(sorted_, BIG)
        psnrs.append(-10 * torch.log10(((img - target(v, BIG)) ** 2).mean()))
    print(f"eval psnr {torch.stack(psnrs).mean().item():.2f}")
    del img, sorted_
report("render")

del opt
grad_accum = torch.zeros(params["means"].shape[0], device=device)
if device == "cuda":
    torch.cuda.empty_cache()
opt = make_opt(fused=device == "cuda")
for step in range(6, 8):
    loss = train_step(opt, step, BIG, use_ckpt=True)
print(f"checkpointed loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
