"""Score-based generative model (Song et al. 2021, VP-SDE with linear beta from 0.1 to 20) of 2-D periodic
Gaussian random fields, as a cosmology / turbulence researcher writes it: training fields made on the GPU
by spectral synthesis (complex white noise from two `torch.randn` draws, amplitude |k|^(-11/6) on the
`torch.fft.rfftfreq`/`fftfreq` grid, `torch.fft.irfft2`, then per-field standardisation) and augmented by
the square's symmetries (`torch.rot90` and `torch.flip`, fixed per step); a small U-Net whose every
convolution uses `padding_mode="circular"` (periodic boundaries), GroupNorm, SiLU, sinusoidal time
embedding added per block, average-pool down and nearest up; epsilon-prediction denoising score matching;
TF32 matmuls and convolutions allowed; Adam, and an EMA of the weights kept by hand in a `deepcopy` with
`torch._foreach_mul_`/`_foreach_add_`.

Phases: 0 model, EMA copy and optimizer; 1 the first training step (batch 64 of 128 x 128 fields);
2 five more steps; 3 probability-flow ODE sampling of 32 fields with the EMA model under no_grad, 40 Heun
steps from t = 1 to 1e-3; 4 the samples' radially averaged power spectra (`torch.fft.rfft2`, |F|^2 binned
by integer wavenumber with `scatter_add_` into a fixed number of bins) against fresh training fields."""

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(3345)
dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
RES, BETA0, BETA1 = 128, 0.1, 20.0


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


ky = torch.fft.fftfreq(RES, device=dev) * RES
kx = torch.fft.rfftfreq(RES, device=dev) * RES
kmag = torch.sqrt(ky[:, None] ** 2 + kx[None, :] ** 2)
amplitude = torch.where(kmag > 0, kmag.clamp_min(1.0) ** (-11.0 / 6.0), torch.zeros_like(kmag))


def random_fields(n):
    noise = torch.complex(
        torch.randn(n, RES, RES // 2 + 1, device=dev), torch.randn(n, RES, RES // 2 + 1, device=dev)
    )
    field = torch.fft.irfft2(noise * amplitude, s=(RES, RES))
    field = (field - field.mean((-2, -1), keepdim=True)) / field.std((-2, -1), keepdim=True)
    return field[:, None]


def conv(cin, cout, k=3):
    return nn.Conv2d(cin, cout, k, padding=k // 2, padding_mode="circular")


class Block(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(8, cin), conv(cin, cout)
        self.t = nn.Linear(temb, cout)
        self.n2, self.c2 = nn.GroupNorm(8, cout), conv(cout, cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))) + self.t(temb)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class UNet(nn.Module):
    def __init__(self, ch=(64, 128, 256), temb=256):
        super().__init__()
        self.temb = nn.Sequential(nn.Linear(128, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = conv(1, ch[0])
        self.down = nn.ModuleList(
            [Block(ch[0], ch[0], temb), Block(ch[0], ch[1], temb), Block(ch[1], ch[2], temb)]
        )
        self.mid = Block(ch[2], ch[2], temb)
        self.up = nn.ModuleList(
            [Block(2 * ch[2], ch[1], temb), Block(2 * ch[1], ch[0], temb), Block(2 * ch[0], ch[0], temb)]
        )
        self.out = nn.Sequential(nn.GroupNorm(8, ch[0]), nn.SiLU(), conv(ch[0], 1))

    def forward(self, x, t):
        freqs = torch.exp(-math.log(10000.0) * torch.arange(64, device=x.device) / 64)
        emb = self.temb(
            torch.cat([torch.sin(1000 * t[:, None] * freqs), torch.cos(1000 * t[:, None] * freqs)], 1)
        )
        h = self.inp(x)
        skips = []
        for i, blk in enumerate(self.down):
            h = blk(h, emb)
            skips.append(h)
            if i < len(self.down) - 1:
                h = F.avg_pool2d(h, 2)
        h = self.mid(h, emb)
        for i, blk in enumerate(self.up):
            h = blk(torch.cat([h, skips.pop()], 1), emb)
            if i < len(self.up) - 1:
                h = F.interpolate(h, scale_factor=2, mode="nearest")
        return self.out(h)


def alpha_sigma(t):
    log_mean = -0.25 * t**2 * (BETA1 - BETA0) - 0.5 * t * BETA0
    return log_mean.exp(), (1 - (2 * log_mean).exp()).sqrt()


model = UNet().to(dev)
ema = copy.deepcopy(model).requires_grad_(False)
opt = torch.optim.Adam(model.parameters(), lr=2e-4)
report("built")


def train_step(step):
    x0 = random_fields(64)
    x0 = torch.rot90(x0, step % 4, dims=(-2, -1))
    if step % 2:
        x0 = torch.flip(x0, dims=(-1,))
    t = torch.rand(64, device=dev) * (1 - 1e-3) + 1e-3
    a, s = alpha_sigma(t)
    eps = torch.randn_like(x0)
    loss = F.mse_loss(model(a[:, None, None, None] * x0 + s[:, None, None, None] * eps, t), eps)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        ema_p, p = list(ema.parameters()), list(model.parameters())
        torch._foreach_mul_(ema_p, 0.999)
        torch._foreach_add_(ema_p, p, alpha=0.001)
    return loss.item()


print(f"step 0 loss {train_step(0):.4f}")
report("first_step")
for step in range(1, 6):
    print(f"step {step} loss {train_step(step):.4f}")
report("steps")


def drift(x, t):
    beta = BETA0 + t * (BETA1 - BETA0)
    _, s = alpha_sigma(t)
    score = -ema(x, t) / s[:, None, None, None]
    return -0.5 * beta[:, None, None, None] * (x + score)


with torch.no_grad():
    x = torch.randn(32, 1, RES, RES, device=dev)
    ts = torch.linspace(1.0, 1e-3, 41, device=dev)
    for i in range(40):
        t0, t1 = ts[i].expand(32), ts[i + 1].expand(32)
        h = ts[i + 1] - ts[i]
        d0 = drift(x, t0)
        x_pred = x + h * d0
        x = x + 0.5 * h * (d0 + drift(x_pred, t1))
    samples = x
print(f"samples std {samples.std().item():.3f}")
report("pf_ode_sampling")


def radial_spectrum(fields, nbins=RES // 2):
    power = torch.fft.rfft2(fields[:, 0]).abs().pow(2).flatten(1)
    bins = kmag.round().long().clamp_max(nbins - 1).flatten().expand_as(power)
    total = torch.zeros(fields.shape[0], nbins, device=dev).scatter_add_(1, bins, power)
    count = torch.zeros(fields.shape[0], nbins, device=dev).scatter_add_(1, bins, torch.ones_like(power))
    return (total / count.clamp_min(1)).mean(0)


with torch.no_grad():
    ps_model, ps_data = radial_spectrum(samples), radial_spectrum(random_fields(256))
    ratio = (ps_model[1:32] / ps_data[1:32]).cpu()
print(f"spectrum ratio k=1..31 mean {ratio.mean().item():.3f}")
report("spectra")
