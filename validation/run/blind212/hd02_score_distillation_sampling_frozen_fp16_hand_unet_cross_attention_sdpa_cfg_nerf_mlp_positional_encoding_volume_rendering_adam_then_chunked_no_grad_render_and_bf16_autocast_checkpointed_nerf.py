"""Score distillation sampling (DreamFusion, Poole et al. 2022) by hand: a NeRF optimised so that its renders
please a frozen text-conditioned pixel-space diffusion U-Net.

The U-Net is written by hand (DeepFloyd-IF-stage-I-like at 64 x 64: channels 128/256/256/512, two ResBlocks
per level with GroupNorm + SiLU and a sinusoidal timestep embedding, self- and cross-attention blocks by
F.scaled_dot_product_attention at 16 x 16 and 8 x 8 over 77 random 768-wide "text" tokens) with random
weights, frozen and cast to fp16. The NeRF is an 8-layer 256-wide ReLU MLP with a skip at layer 4 over a
10-frequency positional encoding of the sample points, a density head and a view-dependent colour head; 64
stratified samples a ray, alpha compositing by an exclusive cumprod of transmittance, a random background.

Each SDS step renders a random camera at 64 x 64, noises the render at a random t (fixed generator), runs the
U-Net on the [unconditional, conditional] pair under no_grad, takes classifier-free guidance 100 and w(t) =
1 - alpha_bar and pushes the gradient into the render with the usual reparametrisation
0.5 * mse(x, (x - grad).detach(), sum). Adam (foreach), fp32 NeRF.

Phases: 3 SDS steps at 2 views per step; a 128 x 128 render of 2 views under no_grad in chunks of 8,192 rays;
then the NeRF under bf16 autocast with every MLP under torch.utils.checkpoint (non-reentrant), 4 views per
step, single-tensor Adam (foreach=False). 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2122)
RES, SAMPLES, HIDDEN, BASE, EVAL_RES = (16, 16, 64, 32, 24) if SMALL else (64, 64, 256, 128, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"
udtype = torch.float16 if device == "cuda" else torch.float32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class AttnBlock(nn.Module):
    def __init__(self, ch, ctx_dim, heads=8):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(32, ch)
        self.qkv = nn.Linear(ch, 3 * ch)
        self.norm_x = nn.LayerNorm(ch)
        self.q = nn.Linear(ch, ch)
        self.kv = nn.Linear(ctx_dim, 2 * ch)
        self.out1 = nn.Linear(ch, ch)
        self.out2 = nn.Linear(ch, ch)

    def split(self, t):
        b, n, c = t.shape
        return t.view(b, n, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, x, ctx):
        b, c, h, w = x.shape
        t = self.norm(x).flatten(2).transpose(1, 2)
        q, k, v = self.qkv(t).chunk(3, dim=-1)
        a = F.scaled_dot_product_attention(self.split(q), self.split(k), self.split(v))
        t = t + self.out1(a.transpose(1, 2).reshape(b, h * w, c))
        k, v = self.kv(ctx).chunk(2, dim=-1)
        a = F.scaled_dot_product_attention(self.split(self.q(self.norm_x(t))), self.split(k), self.split(v))
        t = t + self.out2(a.transpose(1, 2).reshape(b, h * w, c))
        return x + t.transpose(1, 2).reshape(b, c, h, w)


class UNet(nn.Module):
    def __init__(self, base=128, mults=(1, 2, 2, 4), ctx_dim=768):
        super().__init__()
        tdim = base * 4
        self.base = base
        self.time = nn.Sequential(nn.Linear(base, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.inp = nn.Conv2d(3, base, 3, padding=1)
        chans = [base * m for m in mults]
        self.down, self.down_attn, self.downsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        skips, cin = [base], base
        for i, c in enumerate(chans):
            for _ in range(2):
                self.down.append(ResBlock(cin, c, tdim))
                self.down_attn.append(AttnBlock(c, ctx_dim) if i >= 2 else nn.Identity())
                cin = c
                skips.append(c)
            if i < len(chans) - 1:
                self.downsample.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                skips.append(c)
        self.mid1, self.mid_attn, self.mid2 = ResBlock(cin, cin, tdim), AttnBlock(cin, ctx_dim), ResBlock(cin, cin, tdim)
        self.up, self.up_attn, self.upsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for i, c in reversed(list(enumerate(chans))):
            for _ in range(3):
                self.up.append(ResBlock(cin + skips.pop(), c, tdim))
                self.up_attn.append(AttnBlock(c, ctx_dim) if i >= 2 else nn.Identity())
                cin = c
            if i > 0:
                self.upsample.append(nn.Conv2d(c, c, 3, padding=1))
        self.out = nn.Sequential(nn.GroupNorm(32, cin), nn.SiLU(), nn.Conv2d(cin, 3, 3, padding=1))

    def forward(self, x, t, ctx):
        temb = self.time(timestep_embedding(t, self.base).to(x.dtype))
        h = self.inp(x)
        hs = [h]
        di = 0
        for i in range(4):
            for _ in range(2):
                h = self.down[di](h, temb)
                a = self.down_attn[di]
                h = a(h, ctx) if isinstance(a, AttnBlock) else h
                hs.append(h)
                di += 1
            if i < 3:
                h = self.downsample[i](h)
                hs.append(h)
        h = self.mid2(self.mid_attn(self.mid1(h, temb), ctx), temb)
        ui = 0
        for i in range(4):
            for _ in range(3):
                h = self.up[ui](torch.cat([h, hs.pop()], dim=1), temb)
                a = self.up_attn[ui]
                h = a(h, ctx) if isinstance(a, AttnBlock) else h
                ui += 1
            if i < 3:
                h = self.upsample[i](F.interpolate(h, scale_factor=2.0, mode="nearest"))
        return self.out(h)


class NeRF(nn.Module):
    def __init__(self, freqs=10, hidden=256):
        super().__init__()
        self.freqs = freqs
        din = 3 + 6 * freqs
        self.layers = nn.ModuleList(
            [nn.Linear(din, hidden)] + [nn.Linear(hidden + (din if i == 4 else 0), hidden) for i in range(1, 8)]
        )
        self.sigma = nn.Linear(hidden, 1)
        self.feat = nn.Linear(hidden, hidden)
        self.rgb = nn.Sequential(nn.Linear(hidden + 3 + 6 * 4, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, 3))

    def encode(self, x, freqs):
        f = 2.0 ** torch.arange(freqs, device=x.device) * math.pi
        xf = (x[..., None] * f).flatten(-2)
        return torch.cat([x, torch.sin(xf), torch.cos(xf)], dim=-1)

    def forward(self, pts, dirs):
        e = self.encode(pts, self.freqs)
        h = e
        for i, layer in enumerate(self.layers):
            if i == 4:
                h = torch.cat([h, e], dim=-1)
            h = F.relu(layer(h))
        sigma = F.softplus(self.sigma(h) - 1.0)
        rgb = torch.sigmoid(self.rgb(torch.cat([self.feat(h), self.encode(dirs, 4)], dim=-1)))
        return sigma, rgb


def rays(seed, res):
    g = torch.Generator().manual_seed(seed)
    theta, phi = (torch.rand(2, generator=g) * torch.tensor([2 * math.pi, 0.8]) + torch.tensor([0.0, 0.4])).tolist()
    origin = 3.0 * torch.tensor([math.cos(theta) * math.sin(phi), math.cos(phi), math.sin(theta) * math.sin(phi)])
    fwd = F.normalize(-origin, dim=0)
    right = F.normalize(torch.linalg.cross(fwd, torch.tensor([0.0, 1.0, 0.0])), dim=0)
    up = torch.linalg.cross(right, fwd)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, res), torch.linspace(-1, 1, res), indexing="ij")
    d = F.normalize(fwd + 0.6 * (xs[..., None] * right - ys[..., None] * up), dim=-1)
    return origin.to(device).expand(res * res, 3), d.reshape(-1, 3).to(device)


def render(nerf, o, d, use_ckpt=False):
    n = o.shape[0]
    t = torch.linspace(1.5, 4.5, SAMPLES, device=device).expand(n, SAMPLES)
    t = t + torch.rand(n, SAMPLES, device=device) * (3.0 / SAMPLES)
    pts = o[:, None] + d[:, None] * t[..., None]
    dirs = d[:, None].expand_as(pts)
    if use_ckpt:
        sigma, rgb = checkpoint(nerf, pts, dirs, use_reentrant=False)
    else:
        sigma, rgb = nerf(pts, dirs)
    delta = torch.cat([t[:, 1:] - t[:, :-1], torch.full_like(t[:, :1], 1e10)], dim=1)
    alpha = 1 - torch.exp(-sigma.squeeze(-1).float() * delta)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha + 1e-10], dim=1), dim=1)[:, :-1]
    w = alpha * trans
    color = (w[..., None] * rgb.float()).sum(1)
    return color + (1 - w.sum(1, keepdim=True)) * torch.rand(1, 3, device=device)


unet = UNet(base=BASE).to(device=device, dtype=udtype).eval().requires_grad_(False)
nerf = NeRF(hidden=HIDDEN).to(device)
text = torch.randn(1, 77, 768, device=device, dtype=udtype)
null = torch.zeros_like(text)
betas = torch.linspace(1e-4, 0.02, 1000, device=device)
alpha_bar = torch.cumprod(1 - betas, dim=0)
tgen = torch.Generator().manual_seed(7)


def sds_step(opt, views, seed, autocast=False, use_ckpt=False):
    imgs = []
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
        for v in range(views):
            o, d = rays(seed * 10 + v, RES)
            imgs.append(render(nerf, o, d, use_ckpt).float().T.reshape(3, RES, RES))
    x = torch.stack(imgs) * 2 - 1
    t = torch.randint(20, 980, (views,), generator=tgen).to(device)
    with torch.no_grad():
        noise = torch.randn_like(x)
        ab = alpha_bar[t].view(-1, 1, 1, 1)
        xt = (ab.sqrt() * x + (1 - ab).sqrt() * noise).to(udtype)
        eps = unet(torch.cat([xt, xt]), torch.cat([t, t]), torch.cat([null.expand(views, -1, -1), text.expand(views, -1, -1)]))
        eps_u, eps_c = eps.float().chunk(2)
        eps = eps_u + 100.0 * (eps_c - eps_u)
        grad = torch.nan_to_num((1 - ab) * (eps - noise))
    loss = 0.5 * F.mse_loss(x, (x - grad).detach(), reduction="sum") / views
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


opt = torch.optim.Adam(nerf.parameters(), lr=1e-3, foreach=True)
for step in range(3):
    loss = sds_step(opt, 2, step)
print(f"sds loss {loss:.2f}")
report("sds")

with torch.no_grad():
    imgs = []
    for v in range(2):
        o, d = rays(500 + v, EVAL_RES)
        img = torch.cat([render(nerf, o[i : i + 8192], d[i : i + 8192]) for i in range(0, o.shape[0], 8192)])
        imgs.append(img.T.reshape(3, EVAL_RES, EVAL_RES))
    print(f"render mean {torch.stack(imgs).mean().item():.4f}")
    del imgs, img
report("render")

del opt
opt = torch.optim.Adam(nerf.parameters(), lr=1e-3, foreach=False)
for step in range(3, 6):
    loss = sds_step(opt, 4, step, autocast=True, use_ckpt=True)
print(f"bf16 checkpointed sds loss {loss:.2f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
