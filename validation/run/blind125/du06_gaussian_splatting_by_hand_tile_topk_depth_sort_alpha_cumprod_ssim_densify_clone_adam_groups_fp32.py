"""3-D Gaussian splatting written by hand in PyTorch (no CUDA rasteriser): 120,000 Gaussians with
means, log-scales, quaternions, opacity logits and degree-1 spherical-harmonic colours; covariances
from the quaternions, EWA projection through the perspective Jacobian to 2-D conics; per 16x16 tile
the 192 nearest Gaussians that overlap it by `topk` of their depths masked by bounding boxes (sorted
front to back), per pixel Gaussian alphas composited by an exclusive `cumprod` of transmittance; the
3DGS loss (0.8 L1 + 0.2 (1 - SSIM), SSIM by a depthwise 11x11 Gaussian conv2d), Adam with the
paper's per-attribute learning-rate groups, fp32, 2 views per step; the view-space gradient norms
accumulated, then densification by cloning the 10% with the largest (optimizer states extended by
`cat` and the parameters replaced), one more step, then 2 evaluation views at 512x512 under no_grad;
6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12506)
N, IMG, IMG_EVAL, K = (2000, 32, 64, 32) if SMALL else (120000, 256, 512, 192)
TILE, FOCAL = 16, 1.2
device = "cuda" if torch.cuda.is_available() else "cpu"


class Gaussians(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.means = nn.Parameter(torch.rand(n, 3) * 2 - 1)
        self.log_scales = nn.Parameter(torch.full((n, 3), math.log(0.01)) + 0.1 * torch.randn(n, 3))
        self.quats = nn.Parameter(F.normalize(torch.randn(n, 4), dim=-1))
        self.opacity = nn.Parameter(torch.full((n, 1), -2.0))
        self.sh0 = nn.Parameter(torch.rand(n, 3) - 0.5)
        self.sh1 = nn.Parameter(torch.zeros(n, 3, 3))


def quat_to_rot(q):
    w, x, y, z = F.normalize(q, dim=-1).unbind(-1)
    return torch.stack(
        [
            1 - 2 * (y * y + z * z),
            2 * (x * y - w * z),
            2 * (x * z + w * y),
            2 * (x * y + w * z),
            1 - 2 * (x * x + z * z),
            2 * (y * z - w * x),
            2 * (x * z - w * y),
            2 * (y * z + w * x),
            1 - 2 * (x * x + y * y),
        ],
        -1,
    ).view(-1, 3, 3)


def look_at(eye):
    fwd = F.normalize(-eye, dim=0)
    right = F.normalize(torch.linalg.cross(fwd, torch.tensor([0.0, 1.0, 0.0], device=eye.device)), dim=0)
    up = torch.linalg.cross(right, fwd)
    rot = torch.stack([right, up, fwd])
    return rot, -rot @ eye


def render(g, cam, size):
    rot, t = cam
    f = FOCAL * size
    p = g.means @ rot.T + t
    z = p[:, 2].clamp(min=0.2)
    u, v = f * p[:, 0] / z + size / 2, f * p[:, 1] / z + size / 2
    zeros = torch.zeros_like(z)
    jac = torch.stack([f / z, zeros, -f * p[:, 0] / z**2, zeros, f / z, -f * p[:, 1] / z**2], -1).view(
        -1, 2, 3
    )
    r = quat_to_rot(g.quats)
    m = r * torch.exp(g.log_scales)[:, None, :]
    cov3 = m @ m.transpose(1, 2)
    jw = jac @ rot
    cov2 = jw @ cov3 @ jw.transpose(1, 2) + 0.3 * torch.eye(2, device=z.device)
    a, b, c = cov2[:, 0, 0], cov2[:, 0, 1], cov2[:, 1, 1]
    det = (a * c - b * b).clamp(min=1e-12)
    conic = torch.stack([c / det, -b / det, a / det], -1)
    mid = 0.5 * (a + c)
    radius = 3 * torch.sqrt(mid + torch.sqrt((mid * mid - det).clamp(min=0.1)))
    view = F.normalize(g.means - (-rot.T @ t), dim=-1)
    color = (0.28209479 * g.sh0 + 0.48860251 * (g.sh1 * view[:, :, None]).sum(1) + 0.5).clamp(min=0)
    opac = torch.sigmoid(g.opacity[:, 0])

    n_t = size // TILE
    tc = (torch.arange(n_t, device=z.device) + 0.5) * TILE
    ty, tx = torch.meshgrid(tc, tc, indexing="ij")
    tx, ty = tx.reshape(-1, 1), ty.reshape(-1, 1)
    with torch.no_grad():
        hit = ((u[None] - tx).abs() < radius[None] + TILE / 2) & (
            (v[None] - ty).abs() < radius[None] + TILE / 2
        )
        hit &= (p[:, 2] > 0.2)[None]
        depth = torch.where(hit, p[:, 2].detach()[None], torch.full_like(hit, float("inf"), dtype=z.dtype))
        d_sorted, idx = torch.topk(depth, K, dim=1, largest=False, sorted=True)
        valid = torch.isfinite(d_sorted)
    off = torch.arange(TILE, device=z.device) - TILE / 2 + 0.5
    oy, ox = torch.meshgrid(off, off, indexing="ij")
    px, py = tx + ox.reshape(1, -1), ty + oy.reshape(1, -1)  # (tiles, pixels)
    dx = px[:, :, None] - u[idx][:, None, :]
    dy = py[:, :, None] - v[idx][:, None, :]
    cn = conic[idx]
    power = -0.5 * (cn[:, None, :, 0] * dx * dx + cn[:, None, :, 2] * dy * dy) - cn[:, None, :, 1] * dx * dy
    alpha = (opac[idx][:, None, :] * torch.exp(power.clamp(max=0))).clamp(max=0.99) * valid[:, None, :]
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1 - alpha[..., :-1]], -1), -1)
    rgb = ((alpha * trans)[..., None] * color[idx][:, None]).sum(2)  # (tiles, pixels, 3)
    img = rgb.view(n_t, n_t, TILE, TILE, 3).permute(4, 0, 2, 1, 3).reshape(3, size, size)
    return img, u, v


def ssim(x, y):
    g = torch.exp(-((torch.arange(11, device=x.device) - 5.0) ** 2) / (2 * 1.5**2))
    w = (g[:, None] * g[None]) / g.sum() ** 2
    w = w.expand(3, 1, 11, 11).contiguous()
    x, y = x[None], y[None]
    mx, my = F.conv2d(x, w, padding=5, groups=3), F.conv2d(y, w, padding=5, groups=3)
    sxx = F.conv2d(x * x, w, padding=5, groups=3) - mx * mx
    syy = F.conv2d(y * y, w, padding=5, groups=3) - my * my
    sxy = F.conv2d(x * y, w, padding=5, groups=3) - mx * my
    c1, c2 = 0.01**2, 0.03**2
    return ((2 * mx * my + c1) * (2 * sxy + c2) / ((mx * mx + my * my + c1) * (sxx + syy + c2))).mean()


def make_opt(g):
    lrs = {"means": 1.6e-4, "log_scales": 5e-3, "quats": 1e-3, "opacity": 0.05, "sh0": 2.5e-3, "sh1": 1.25e-4}
    return torch.optim.Adam(
        [{"params": [getattr(g, k)], "lr": lr, "name": k} for k, lr in lrs.items()], lr=0.0, eps=1e-15
    )


def clone(g, opt, sel):
    for group in opt.param_groups:
        old = group["params"][0]
        new = nn.Parameter(torch.cat([old.detach(), old.detach()[sel]]))
        state = opt.state.pop(old, None)
        if state is not None:
            state["exp_avg"] = torch.cat([state["exp_avg"], torch.zeros_like(state["exp_avg"][sel])])
            state["exp_avg_sq"] = torch.cat([state["exp_avg_sq"], torch.zeros_like(state["exp_avg_sq"][sel])])
            opt.state[new] = state
        group["params"][0] = new
        setattr(g, group["name"], new)


def camera(i):
    ang = 2 * math.pi * i / 7
    return look_at(torch.tensor([4 * math.sin(ang), 0.5, 4 * math.cos(ang)], device=device))


g = Gaussians(N).to(device)
opt = make_opt(g)
targets = torch.rand(6, 3, IMG, IMG, device=device)
grad_acc = torch.zeros(N, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    if step == 2:
        sel = torch.topk(grad_acc, N // 10).indices
        clone(g, opt, sel)
        if device == "cuda":
            print(
                f"densify {g.means.shape[0]} peak {torch.cuda.max_memory_allocated()}"
                f" reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
    opt.zero_grad(set_to_none=True)
    for view in range(2):
        img, u, v = render(g, camera(2 * step + view), IMG)
        u.retain_grad()
        v.retain_grad()
        tgt = targets[2 * step + view]
        loss = 0.8 * (img - tgt).abs().mean() + 0.2 * (1 - ssim(img, tgt))
        loss.backward()
        if step < 2:
            grad_acc += torch.sqrt(u.grad**2 + v.grad**2)
        del img, u, v, loss
    opt.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    frames = [render(g, camera(i + 0.5), IMG_EVAL)[0] for i in range(2)]
if device == "cuda":
    print(
        f"eval {tuple(frames[0].shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
