"""Score-based generative modelling through SDEs (Song et al. 2021), VE-SDE, written by hand as the
score_sde_pytorch port does. A small NCSN++-like U-Net at 32 x 32 (channels 64/128/256, two GroupNorm +
SiLU residual blocks per level with the time embedding added, a self-attention block at 8 x 8 via
`F.scaled_dot_product_attention`, skip connections by concatenation, nearest upsampling), conditioned on
log(sigma) through Gaussian Fourier features (a fixed random `nn.Parameter(requires_grad=False)`), the
output divided by sigma. Denoising score matching over sigma = sigma_min (sigma_max / sigma_min)^t, t ~
U(eps, 1), loss mean((sigma s(x + sigma z) + z)^2) (score_sde's reduce_mean=True).
Phase 1: 6 training steps at batch 128 under fp16 autocast with a GradScaler, Adam (lr 2e-4) with linear
warmup via `LambdaLR`, gradient clipping at 1 after `scaler.unscale_`, and an EMA copy
(`copy.deepcopy`, `torch._foreach_mul_`/`_foreach_add_` over the parameter lists, decay 0.999).
Phase 2: the EMA model samples 64 images with the predictor-corrector sampler in `torch.no_grad` under fp16
autocast: 40 reverse-diffusion predictor steps each followed by one Langevin corrector step whose step size
comes from the signal-to-noise ratio 0.16 and the norms of the score and the noise (`torch.linalg.norm`
over flattened samples), final denoising step. Phase 3: inpainting of 32 images with the same sampler:
the known half (a mask) replaced after every predictor and corrector step by the data perturbed to the
current sigma; then the figures of the inpainted region reported. 3 phases."""

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2974)
dev = "cuda"
SIGMA_MIN, SIGMA_MAX = 0.01, 50.0


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class GaussianFourier(nn.Module):
    def __init__(self, dim=64, scale=16.0):
        super().__init__()
        self.W = nn.Parameter(torch.randn(dim) * scale, requires_grad=False)

    def forward(self, x):
        proj = x[:, None] * self.W[None] * 2 * math.pi
        return torch.cat([proj.sin(), proj.cos()], -1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(min(32, cin // 4), cin), nn.Conv2d(cin, cout, 3, 1, 1)
        self.t = nn.Linear(temb, cout)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, 1, 1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, t):
        h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(t))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return (self.skip(x) + h) / math.sqrt(2.0)


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm, self.qkv, self.out = nn.GroupNorm(32, c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, 4, c // 4, h * w).transpose(-1, -2).unbind(1)
        o = F.scaled_dot_product_attention(q, k, v).transpose(-1, -2).reshape(b, c, h, w)
        return (x + self.out(o)) / math.sqrt(2.0)


class ScoreNet(nn.Module):
    def __init__(self, ch=(64, 128, 256), temb=256):
        super().__init__()
        self.fourier = GaussianFourier(64)
        self.temb = nn.Sequential(nn.Linear(128, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(3, ch[0], 3, 1, 1)
        self.down = nn.ModuleList()
        cin = ch[0]
        skips = [cin]
        for c in ch:
            self.down.append(nn.ModuleList([ResBlock(cin, c, temb), ResBlock(c, c, temb)]))
            cin = c
            skips += [c, c]
        self.mid1, self.attn, self.mid2 = ResBlock(cin, cin, temb), Attn(cin), ResBlock(cin, cin, temb)
        self.up = nn.ModuleList()
        for c in reversed(ch):
            self.up.append(
                nn.ModuleList([ResBlock(cin + skips.pop(), c, temb), ResBlock(c + skips.pop(), c, temb)])
            )
            cin = c
        self.out = nn.Sequential(nn.GroupNorm(16, cin), nn.SiLU(), nn.Conv2d(cin, 3, 3, 1, 1))

    def forward(self, x, sigma):
        t = self.temb(self.fourier(sigma.log()))
        h = self.inp(x)
        hs = [h]
        for i, blocks in enumerate(self.down):
            for blk in blocks:
                h = blk(h, t)
                hs.append(h)
            if i < len(self.down) - 1:
                h = F.avg_pool2d(h, 2)
        h = self.mid2(self.attn(self.mid1(h, t)), t)
        for i, blocks in enumerate(self.up):
            for blk in blocks:
                h = blk(torch.cat([h, hs.pop()], 1), t)
            if i < len(self.up) - 1:
                h = F.interpolate(h, scale_factor=2.0, mode="nearest")
        hs.clear()
        return self.out(h) / sigma[:, None, None, None]


def sigma_at(t):
    return SIGMA_MIN * (SIGMA_MAX / SIGMA_MIN) ** t


model = ScoreNet().to(dev)
ema = copy.deepcopy(model).eval().requires_grad_(False)
opt = torch.optim.Adam(model.parameters(), lr=2e-4)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 5000))
scaler = torch.amp.GradScaler("cuda")
params, ema_params = list(model.parameters()), list(ema.parameters())
for _ in range(6):
    x = torch.rand(128, 3, 32, 32, device=dev) * 2 - 1
    t = torch.rand(128, device=dev) * (1 - 1e-5) + 1e-5
    sigma = sigma_at(t)
    z = torch.randn_like(x)
    with torch.autocast("cuda", dtype=torch.float16):
        score = model(x + sigma[:, None, None, None] * z, sigma)
        loss = ((score.float() * sigma[:, None, None, None] + z) ** 2).mean()
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    sched.step()
    with torch.no_grad():
        torch._foreach_mul_(ema_params, 0.999)
        torch._foreach_add_(ema_params, params, alpha=0.001)
print("dsm loss", round(loss.item(), 3), "scale", scaler.get_scale())
report("dsm_fp16_gradscaler_warmup_clip_foreach_ema")

del loss, score, x, z, sigma, t


def pc_sample(n, steps=40, snr=0.16, known=None, mask=None):
    ts = torch.linspace(1.0, 1e-5, steps, device=dev)
    x = torch.randn(n, 3, 32, 32, device=dev) * SIGMA_MAX
    for i in range(steps):
        sig = sigma_at(ts[i]).expand(n)
        sig_next = sigma_at(ts[i + 1]).expand(n) if i + 1 < steps else torch.zeros_like(sig)
        with torch.autocast("cuda", dtype=torch.float16):
            score = ema(x, sig).float()
        var = (sig**2 - sig_next**2)[:, None, None, None]
        mean = x + var * score
        x = mean + var.sqrt() * torch.randn_like(x)
        if known is not None:
            x = torch.where(mask, known + sig_next[:, None, None, None] * torch.randn_like(known), x)
        if i + 1 < steps:
            with torch.autocast("cuda", dtype=torch.float16):
                grad = ema(x, sig_next).float()
            noise = torch.randn_like(x)
            g_norm = torch.linalg.norm(grad.reshape(n, -1), dim=-1).mean()
            n_norm = torch.linalg.norm(noise.reshape(n, -1), dim=-1).mean()
            eps = 2 * (snr * n_norm / g_norm) ** 2
            x = x + eps * grad + (2 * eps).sqrt() * noise
            if known is not None:
                x = torch.where(mask, known + sig_next[:, None, None, None] * torch.randn_like(known), x)
    return mean.clamp(-1, 1)


with torch.no_grad():
    samples = pc_sample(64)
print("pc samples", tuple(samples.shape), round(samples.mean().item(), 4))
report("predictor_corrector_langevin_64_samples_fp16")

del samples
data = torch.rand(32, 3, 32, 32, device=dev) * 2 - 1
mask = torch.zeros(32, 1, 32, 32, dtype=torch.bool, device=dev)
mask[..., :16] = True
with torch.no_grad():
    filled = pc_sample(32, known=data, mask=mask)
err = ((filled - data) ** 2)[~mask.expand_as(data)].mean()
print("inpainted", tuple(filled.shape), "masked mse", round(err.item(), 4))
report("pc_inpainting_32_images_known_half")
