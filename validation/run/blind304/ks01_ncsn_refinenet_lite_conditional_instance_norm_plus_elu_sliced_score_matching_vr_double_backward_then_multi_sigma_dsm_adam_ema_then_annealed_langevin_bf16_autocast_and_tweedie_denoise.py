"""NCSN (Song & Ermon 2019) by hand on 32x32 RGB images: a RefineNet-lite score network (ELU, dilated
residual conv blocks, conditional instance normalization++ whose per-channel gamma, alpha and beta come
from an nn.Embedding over the index of the noise level), first trained for two steps with sliced score
matching with variance reduction (Song et al. 2019: v ~ N(0, I), the Jacobian-vector term from
torch.autograd.grad((s * v).sum(), x, create_graph=True), a double backward through every conv, norm
and ELU), then with denoising score matching over 10 geometric sigmas (lambda(sigma) = sigma^2 weighting,
one random sigma index per sample), Adam with an EMA copy of the weights (copy.deepcopy, updated with
torch._foreach_mul_/_foreach_add_); then annealed Langevin dynamics from the EMA network under no_grad and
bf16 autocast (10 sigmas x 5 steps), and a final Tweedie denoising step in fp32. fp32 weights.

Phases: 0 model, EMA copy, optimizer state; 1 sliced score matching steps; 2 DSM steps with EMA;
3 annealed Langevin sampling; 4 Tweedie denoise and statistics."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(30401)
device = "cuda" if torch.cuda.is_available() else "cpu"
C, B, NSIG, SSM_STEPS, DSM_STEPS, NSAMP, LSTEPS = (
    (16, 4, 4, 1, 1, 4, 1) if SMALL else (128, 64, 10, 2, 4, 256, 5)
)
sigmas = torch.exp(torch.linspace(math.log(1.0), math.log(0.01), NSIG)).to(device)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class CondInstanceNormPlus(nn.Module):
    def __init__(self, ch, n):
        super().__init__()
        self.norm = nn.InstanceNorm2d(ch, affine=False, track_running_stats=False)
        self.embed = nn.Embedding(n, 3 * ch)
        self.embed.weight.data[:, : 2 * ch].normal_(1, 0.02)
        self.embed.weight.data[:, 2 * ch :].zero_()

    def forward(self, x, y):
        means = x.mean(dim=(2, 3))
        m = means.mean(dim=-1, keepdim=True)
        v = means.var(dim=-1, keepdim=True)
        means = (means - m) / torch.sqrt(v + 1e-5)
        h = self.norm(x)
        gamma, alpha, beta = self.embed(y).chunk(3, dim=-1)
        h = h + means[..., None, None] * alpha[..., None, None]
        return gamma[..., None, None] * h + beta[..., None, None]


class ResBlock(nn.Module):
    def __init__(self, cin, cout, n, dilation=1, down=False):
        super().__init__()
        self.n1 = CondInstanceNormPlus(cin, n)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=dilation, dilation=dilation)
        self.n2 = CondInstanceNormPlus(cout, n)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=dilation, dilation=dilation)
        self.down = down
        self.skip = nn.Conv2d(cin, cout, 1) if (cin != cout or down) else nn.Identity()

    def forward(self, x, y):
        h = self.c1(F.elu(self.n1(x, y)))
        h = self.c2(F.elu(self.n2(h, y)))
        s = self.skip(x)
        if self.down:
            h, s = F.avg_pool2d(h, 2), F.avg_pool2d(s, 2)
        return h + s


class ScoreNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, C, 3, padding=1)
        self.d1 = ResBlock(C, C, NSIG)
        self.d2 = ResBlock(C, 2 * C, NSIG, down=True)
        self.d3 = ResBlock(2 * C, 2 * C, NSIG, dilation=2)
        self.d4 = ResBlock(2 * C, 2 * C, NSIG, dilation=4)
        self.u1 = ResBlock(4 * C, 2 * C, NSIG)
        self.u2 = ResBlock(3 * C, C, NSIG)
        self.out_norm = CondInstanceNormPlus(C, NSIG)
        self.out = nn.Conv2d(C, 3, 3, padding=1)

    def forward(self, x, y):
        h0 = self.inp(2 * x - 1)
        h1 = self.d1(h0, y)
        h2 = self.d2(h1, y)
        h3 = self.d3(h2, y)
        h4 = self.d4(h3, y)
        u = self.u1(torch.cat([h4, h2], 1), y)
        u = F.interpolate(u, scale_factor=2, mode="bilinear", align_corners=False)
        u = self.u2(torch.cat([u, h1], 1), y)
        out = self.out(F.elu(self.out_norm(u, y)))
        return out / sigmas[y].view(-1, 1, 1, 1)


def make_batch(n):
    base = torch.rand(n, 3, 8, 8, device=device)
    return F.interpolate(base, size=32, mode="bilinear", align_corners=False).clamp(0, 1)


score = ScoreNet().to(device)
ema = copy.deepcopy(score).requires_grad_(False)
opt = torch.optim.Adam(score.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8)
print("params", sum(p.numel() for p in score.parameters()))
report("model")

# Phase 1: sliced score matching (variance-reduced) at the smallest sigma's conditioning.
for step in range(SSM_STEPS):
    x = (make_batch(B) + sigmas[-1] * torch.randn(B, 3, 32, 32, device=device)).requires_grad_(True)
    y = torch.full((B,), NSIG - 1, device=device, dtype=torch.long)
    s = score(x, y)
    v = torch.randn_like(x)
    gv = torch.autograd.grad((s * v).sum(), x, create_graph=True)[0]
    loss = ((gv * v).flatten(1).sum(1) + 0.5 * s.square().flatten(1).sum(1)).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"ssm {step} loss {loss.item():.2f}")
    del x, s, v, gv, loss
report("ssm")

# Phase 2: denoising score matching over all noise levels, with an EMA of the weights.
ema_p = list(ema.parameters())
live_p = list(score.parameters())
for step in range(DSM_STEPS):
    x = make_batch(B)
    y = torch.randint(0, NSIG, (B,), device=device)
    sig = sigmas[y].view(-1, 1, 1, 1)
    noise = torch.randn_like(x) * sig
    target = -noise / sig**2
    s = score(x + noise, y)
    loss = (0.5 * ((s - target) ** 2).flatten(1).sum(1) * sig.flatten() ** 2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        torch._foreach_mul_(ema_p, 0.999)
        torch._foreach_add_(ema_p, live_p, alpha=0.001)
    print(f"dsm {step} loss {loss.item():.2f}")
    del x, y, sig, noise, target, s, loss
report("dsm")

# Phase 3: annealed Langevin dynamics with the EMA network.
eps = 2e-5
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    xs = torch.rand(NSAMP, 3, 32, 32, device=device)
    for i in range(NSIG):
        y = torch.full((NSAMP,), i, device=device, dtype=torch.long)
        alpha = eps * (sigmas[i] / sigmas[-1]) ** 2
        for _ in range(LSTEPS):
            g = ema(xs, y).float()
            xs = xs + alpha * g + torch.sqrt(2 * alpha) * torch.randn_like(xs)
report("langevin")

# Phase 4: Tweedie denoising at the last sigma, in fp32.
with torch.no_grad():
    y = torch.full((NSAMP,), NSIG - 1, device=device, dtype=torch.long)
    x0 = (xs + sigmas[-1] ** 2 * ema(xs, y)).clamp(0, 1)
    print(f"samples mean {x0.mean().item():.4f} std {x0.std().item():.4f}")
report("tweedie")
