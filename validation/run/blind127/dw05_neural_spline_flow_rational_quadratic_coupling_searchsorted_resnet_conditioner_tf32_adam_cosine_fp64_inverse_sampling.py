"""A neural spline flow (Durkan et al. 2019) on 96-dimensional data, written from nflows' rational-
quadratic spline: 10 coupling layers, each with a residual MLP conditioner (LayerNorm, GELU, 512
wide) that outputs the bin widths, heights and derivatives of a monotone rational-quadratic spline
of 16 bins on [-6, 6] (identity tails outside) for the other half of the dimensions, the bin found
by torch.searchsorted and the parameters gathered; random fixed permutations (index_select)
between layers and an ActNorm; the log-determinant summed per layer; trained by maximum likelihood
with TF32 matmuls, Adam (foreach=False), a cosine learning rate and gradient-norm clipping at
batch 8192 for 3 steps; then the test negative log-likelihood under no_grad, sampling 20,000 points
through the inverse spline (the quadratic's root), and the round-trip error of a copy of the flow in
float64; 6 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12705)
D, LAYERS, HID, BINS, B, NSAMP = (8, 2, 32, 4, 64, 100) if SMALL else (96, 10, 512, 16, 8192, 20000)
BOUND, MIN_W, MIN_H, MIN_D = 6.0, 1e-3, 1e-3, 1e-3
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True


def rq_spline(x, w, h, d, inverse):
    inside = (x >= -BOUND) & (x <= BOUND)
    out = x.clone()
    logdet = torch.zeros_like(x)
    xi = x[inside]
    w, h, d = w[inside], h[inside], d[inside]
    w = F.softmax(w, -1)
    w = MIN_W + (1 - MIN_W * BINS) * w
    cw = F.pad(torch.cumsum(w, -1), (1, 0))
    cw = 2 * BOUND * cw - BOUND
    cw[..., 0], cw[..., -1] = -BOUND, BOUND
    w = cw[..., 1:] - cw[..., :-1]
    d = MIN_D + F.softplus(F.pad(d, (1, 1), value=math.log(math.expm1(1 - MIN_D))))
    h = F.softmax(h, -1)
    h = MIN_H + (1 - MIN_H * BINS) * h
    ch = F.pad(torch.cumsum(h, -1), (1, 0))
    ch = 2 * BOUND * ch - BOUND
    ch[..., 0], ch[..., -1] = -BOUND, BOUND
    h = ch[..., 1:] - ch[..., :-1]
    edges = ch if inverse else cw
    edges = edges.clone()
    edges[..., -1] += 1e-6
    idx = (torch.searchsorted(edges, xi[..., None].contiguous()) - 1).clamp(0, BINS - 1)
    in_cw, in_w = cw.gather(-1, idx)[..., 0], w.gather(-1, idx)[..., 0]
    in_ch, in_h = ch.gather(-1, idx)[..., 0], h.gather(-1, idx)[..., 0]
    delta = h / w
    in_delta = delta.gather(-1, idx)[..., 0]
    in_d, in_d1 = d.gather(-1, idx)[..., 0], d[..., 1:].gather(-1, idx)[..., 0]
    if inverse:
        a = (xi - in_ch) * (in_d + in_d1 - 2 * in_delta) + in_h * (in_delta - in_d)
        b = in_h * in_d - (xi - in_ch) * (in_d + in_d1 - 2 * in_delta)
        c = -in_delta * (xi - in_ch)
        disc = b.pow(2) - 4 * a * c
        root = (2 * c) / (-b - torch.sqrt(disc.clamp_min(0)))
        y = root * in_w + in_cw
        t1 = root * (1 - root)
        denom = in_delta + (in_d + in_d1 - 2 * in_delta) * t1
        deriv = in_delta.pow(2) * (in_d1 * root.pow(2) + 2 * in_delta * t1 + in_d * (1 - root).pow(2))
        ld = -(torch.log(deriv) - 2 * torch.log(denom))
    else:
        theta = (xi - in_cw) / in_w
        t1 = theta * (1 - theta)
        num = in_h * (in_delta * theta.pow(2) + in_d * t1)
        denom = in_delta + (in_d + in_d1 - 2 * in_delta) * t1
        y = in_ch + num / denom
        deriv = in_delta.pow(2) * (in_d1 * theta.pow(2) + 2 * in_delta * t1 + in_d * (1 - theta).pow(2))
        ld = torch.log(deriv) - 2 * torch.log(denom)
    out = out.masked_scatter(inside, y)
    logdet = logdet.masked_scatter(inside, ld)
    return out, logdet.sum(-1)


class ResMLP(nn.Module):
    def __init__(self, din, dout):
        super().__init__()
        self.inp = nn.Linear(din, HID)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(HID), nn.GELU(), nn.Linear(HID, HID), nn.GELU(), nn.Linear(HID, HID))
            for _ in range(2)
        )
        self.out = nn.Linear(HID, dout)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x):
        h = self.inp(x)
        for blk in self.blocks:
            h = h + blk(h)
        return self.out(h)


class Coupling(nn.Module):
    def __init__(self):
        super().__init__()
        self.na, self.nb = D // 2, D - D // 2
        self.net = ResMLP(self.na, self.nb * (3 * BINS - 1))

    def forward(self, x, inverse=False):
        xa, xb = x[:, : self.na], x[:, self.na :]
        p = self.net(xa).view(-1, self.nb, 3 * BINS - 1)
        w, h, d = p[..., :BINS], p[..., BINS : 2 * BINS], p[..., 2 * BINS :]
        yb, ld = rq_spline(xb, w / math.sqrt(HID), h / math.sqrt(HID), d, inverse)
        return torch.cat([xa, yb], 1), ld


class ActNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(D))
        self.log_scale = nn.Parameter(torch.zeros(D))

    def forward(self, x, inverse=False):
        if inverse:
            return (x - self.loc) * torch.exp(-self.log_scale), -self.log_scale.sum().expand(x.shape[0])
        return x * torch.exp(self.log_scale) + self.loc, self.log_scale.sum().expand(x.shape[0])


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList()
        for i in range(LAYERS):
            self.layers.append(ActNorm())
            self.layers.append(Coupling())
            self.register_buffer(f"perm{i}", torch.randperm(D))
        self.register_buffer("log2pi", torch.tensor(math.log(2 * math.pi)))

    def log_prob(self, x):
        total = torch.zeros(x.shape[0], device=x.device, dtype=x.dtype)
        for i in range(LAYERS):
            x, ld = self.layers[2 * i](x)
            total = total + ld
            x, ld = self.layers[2 * i + 1](x)
            total = total + ld
            x = x.index_select(1, getattr(self, f"perm{i}"))
        return total - 0.5 * (x.pow(2) + self.log2pi).sum(1)

    def inverse(self, z):
        for i in reversed(range(LAYERS)):
            z = z.index_select(1, torch.argsort(getattr(self, f"perm{i}")))
            z, _ = self.layers[2 * i + 1](z, inverse=True)
            z, _ = self.layers[2 * i](z, inverse=True)
        return z


flow = Flow().to(device)
opt = torch.optim.Adam(flow.parameters(), lr=5e-4, foreach=False)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
mix = torch.randn(8, D, device=device)
data = mix[torch.randint(0, 8, (4 * B,), device=device)] + 0.3 * torch.randn(4 * B, D, device=device)
if device == "cuda":
    print(f"flow {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = data[torch.randint(0, 4 * B, (B,), device=device)]
    loss = -flow.log_prob(x).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(flow.parameters(), 5.0)
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} nll {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, loss
flow.eval()
with torch.no_grad():
    test = mix[torch.randint(0, 8, (B,), device=device)] + 0.3 * torch.randn(B, D, device=device)
    nll = -flow.log_prob(test).mean() / D
    samples = flow.inverse(torch.randn(NSAMP, D, device=device))
if device == "cuda":
    print(
        f"test nll/dim {nll.item():.3f} sample std {samples.std().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
flow64 = copy.deepcopy(flow).double()
with torch.no_grad():
    z = torch.randn(B // 4, D, device=device, dtype=torch.float64)
    x = flow64.inverse(z)
    lp = flow64.log_prob(x)
if device == "cuda":
    print(
        f"fp64 logp {lp.mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke fp64 logp {lp.mean().item():.3f}")
