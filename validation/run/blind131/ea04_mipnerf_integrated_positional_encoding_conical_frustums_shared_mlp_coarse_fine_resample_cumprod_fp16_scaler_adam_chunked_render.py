"""mip-NeRF written from the paper: rays from a pinhole camera (random poses), conical frustums
per sample interval as Gaussians (mean and diagonal covariance from the cone's radius), the
integrated positional encoding (expected sin/cos, exp(-0.5 var * 4^l)) of 16 levels, one MLP (8
layers of 256 with a skip, density by softplus, view-dependent colour from a 4-frequency direction
encoding) used for both coarse and fine passes, the fine 128+1 interval edges drawn by inverse-CDF
`searchsorted` over the coarse weights blurred by a 2-tap max filter, volume rendering with
`cumprod` transmittance (alpha composited, white background), loss 0.1 coarse + fine MSE; fp16
autocast with a GradScaler, Adam with a log-linear learning rate, 3 steps of 8,192 rays; then a
400x400 image rendered in chunks of 16,384 rays under no_grad with its depth map; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13104)
RAYS, NS, W, IMG, CHUNK = (256, 16, 64, 32, 512) if SMALL else (8192, 128, 256, 400, 16384)
L_POS, L_DIR = 16, 4
NEAR, FAR = 2.0, 6.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def get_rays(n, h=None, w=None):
    focal = 400.0
    if h is None:
        i = torch.rand(n, device=device) * 400
        j = torch.rand(n, device=device) * 400
    else:
        j, i = torch.meshgrid(
            torch.arange(h, device=device, dtype=torch.float32),
            torch.arange(w, device=device, dtype=torch.float32),
            indexing="ij",
        )
        i, j = i.flatten(), j.flatten()
    dirs = torch.stack([(i - 200) / focal, -(j - 200) / focal, -torch.ones_like(i)], -1)
    rot = torch.linalg.qr(torch.randn(3, 3, device=device)).Q
    d = dirs @ rot.T
    o = (rot @ torch.tensor([0.0, 0.0, 4.0], device=device)).expand_as(d)
    radius = 2 / math.sqrt(12) / focal * torch.ones(d.shape[0], 1, device=device)
    return o, d, radius


def frustum_gaussians(o, d, radius, t):
    t0, t1 = t[:, :-1], t[:, 1:]
    mu, hw = (t0 + t1) / 2, (t1 - t0) / 2
    t_mean = mu + 2 * mu * hw**2 / (3 * mu**2 + hw**2)
    t_var = hw**2 / 3 - 4 / 15 * (hw**4 * (12 * mu**2 - hw**2) / (3 * mu**2 + hw**2) ** 2)
    r_var = radius**2 * (mu**2 / 4 + 5 / 12 * hw**2 - 4 / 15 * hw**4 / (3 * mu**2 + hw**2))
    mean = o[:, None] + t_mean[..., None] * d[:, None]
    d2 = d**2
    null = 1 - d2 / (d2.sum(-1, keepdim=True) + 1e-10)
    cov = t_var[..., None] * d2[:, None] + r_var[..., None] * null[:, None]
    return mean, cov


def ipe(mean, cov):
    scales = 2.0 ** torch.arange(L_POS, device=mean.device)
    y = (mean[..., None, :] * scales[:, None]).flatten(-2)
    y_var = (cov[..., None, :] * scales[:, None] ** 2).flatten(-2)
    damp = torch.exp(-0.5 * y_var)
    return torch.cat([torch.sin(y) * damp, torch.cos(y) * damp], -1)


def dir_enc(d):
    bands = 2.0 ** torch.arange(L_DIR, device=d.device)
    db = (d[..., None] * bands).flatten(-2)
    return torch.cat([d, db.sin(), db.cos()], -1)


class MipMLP(nn.Module):
    def __init__(self):
        super().__init__()
        din = 6 * L_POS
        self.layers = nn.ModuleList(
            [nn.Linear(din if i == 0 else (W + din if i == 5 else W), W) for i in range(8)]
        )
        self.sigma = nn.Linear(W, 1)
        self.bottleneck = nn.Linear(W, W)
        self.rgb = nn.Sequential(nn.Linear(W + 3 + 6 * L_DIR, W // 2), nn.ReLU(), nn.Linear(W // 2, 3))

    def forward(self, x, dirs):
        h = x
        for i, lin in enumerate(self.layers):
            if i == 5:
                h = torch.cat([h, x], -1)
            h = F.relu(lin(h))
        sigma = F.softplus(self.sigma(h) - 1)
        de = dir_enc(dirs)[:, None].expand(-1, h.shape[1], -1)
        rgb = torch.sigmoid(self.rgb(torch.cat([self.bottleneck(h), de], -1)))
        return rgb * 1.002 - 0.001, sigma[..., 0]


def render(rgb, sigma, t, d):
    delta = (t[:, 1:] - t[:, :-1]) * d.norm(dim=-1, keepdim=True)
    alpha = 1 - torch.exp(-sigma.float() * delta)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], -1), -1)[:, :-1]
    w = alpha * trans
    color = (w[..., None] * rgb.float()).sum(1) + (1 - w.sum(-1, keepdim=True))
    depth = (w * (t[:, :-1] + t[:, 1:]) / 2).sum(-1)
    return color, depth, w


def resample(t, w, n):
    wp = torch.cat([w[:, :1], w, w[:, -1:]], -1)
    wmax = torch.maximum(wp[:, :-1], wp[:, 1:])
    wb = (wmax[:, :-1] + wmax[:, 1:]) / 2 + 0.01
    pdf = wb / wb.sum(-1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[:, :1]), pdf.cumsum(-1).clamp(max=1)], -1)
    u = torch.linspace(0, 1 - 1e-6, n + 1, device=t.device).expand(t.shape[0], -1).contiguous()
    u = u + torch.rand_like(u) / (n + 1)
    idx = torch.searchsorted(cdf, u.clamp(max=1 - 1e-6), right=True)
    lo, hi = (idx - 1).clamp(min=0), idx.clamp(max=cdf.shape[-1] - 1)
    c0, c1 = cdf.gather(1, lo), cdf.gather(1, hi)
    t0, t1 = t.gather(1, lo), t.gather(1, hi)
    f = ((u - c0) / (c1 - c0).clamp(min=1e-8)).clamp(0, 1)
    return (t0 + f * (t1 - t0)).sort(-1).values.detach()


def mipnerf(model, o, d, radius):
    t = torch.linspace(NEAR, FAR, NS + 1, device=o.device).expand(o.shape[0], -1)
    t = t + torch.rand_like(t) * (FAR - NEAR) / NS * 0.5
    t = t.sort(-1).values
    outs = []
    for level in range(2):
        mean, cov = frustum_gaussians(o, d, radius, t)
        rgb, sigma = model(ipe(mean, cov), F.normalize(d, dim=-1))
        color, depth, w = render(rgb, sigma, t, d)
        outs.append((color, depth))
        if level == 0:
            t = resample(t, w.detach(), NS)
    return outs


model = MipMLP().to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-4, eps=1e-6)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: math.exp(math.log(5e-6 / 5e-4) * min(s / 1e6, 1)))
scaler = torch.amp.GradScaler("cuda", enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    o, d, radius = get_rays(RAYS)
    target = torch.rand(RAYS, 3, device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        (c0, _), (c1, _) = mipnerf(model, o, d, radius)
        loss = 0.1 * F.mse_loss(c0, target) + F.mse_loss(c1, target)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    if device == "cuda":
        psnr = -10 * torch.log10(F.mse_loss(c1.detach(), target))
        print(
            f"step {step} loss {loss.item():.4f} psnr {psnr.item():.2f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del c0, c1, loss

o, d, radius = get_rays(0, IMG, IMG)
colors, depths = [], []
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    for i in range(0, o.shape[0], CHUNK):
        _, (c, dep) = mipnerf(model, o[i : i + CHUNK], d[i : i + CHUNK], radius[i : i + CHUNK])
        colors.append(c)
        depths.append(dep)
img = torch.cat(colors).reshape(IMG, IMG, 3)
depth = torch.cat(depths).reshape(IMG, IMG)
if device == "cuda":
    print(
        f"render {tuple(img.shape)} mean depth {depth.mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
