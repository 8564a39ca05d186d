"""A class-conditional DiT sampler run by CUDA graphs: the classifier-free-guided DDIM step (the batch doubled
by `torch.cat`, conditional and null-class labels, guidance mix, the DDIM update written in place into a
static latent) is captured into one graph, the convolutional decoder that turns the final latent into pixels
into a second, and the two share one private memory pool made by `torch.cuda.graph_pool_handle()` (the pattern
of PyTorch's CUDA-graph notes for graphs that run one after the other). The timestep and the DDIM coefficients
live in static device tensors refreshed by `copy_` before each replay.

Model: fp16 weights, latent 4 channels, patch 2, 12 DiT blocks at 768 (12 heads, MLP 3,072), adaLN-zero
modulation from a sinusoidal timestep embedding plus a class embedding (1,000 classes + the null class), SDPA
attention. Decoder: Conv2d 4->256, three x2 nearest upsamplings each followed by Conv2d + GroupNorm(32) + SiLU
(256, 128, 64 channels), Conv2d 64->3.

Phases: 0 weights; 1 warm-up of both callables on a side stream and the capture of both graphs into the shared
pool (16 images, 32 x 32 latents: batch 32 through the denoiser); 2 two rounds of 16 images by 50 step replays
and one decoder replay each, images to the host; 3 the graphs and their statics deleted, `empty_cache()`, and
a second pair at 48 x 48 latents (8 images) whose decoder graph shares the denoiser graph's pool through
`pool=g.pool()`, 25 step replays and a decode, `memory_stats()` keys printed; 4 everything graphed released,
`empty_cache()`, and 4 images sampled eagerly at 32 x 32 in 10 steps. 5 phases. Seeded."""

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3432)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
if SMALL:
    D, DEPTH, HEADS, IMAGES, LAT, LAT2, IMAGES2, STEPS, STEPS2, CH = 64, 2, 2, 2, 8, 12, 2, 3, 2, (32, 16, 16)
else:
    D, DEPTH, HEADS, IMAGES, LAT, LAT2, IMAGES2, STEPS, STEPS2, CH = (
        768,
        12,
        12,
        16,
        32,
        48,
        8,
        50,
        25,
        (256, 128, 64),
    )
CLASSES, PATCH, GUIDANCE, T_TRAIN = 1000, 2, 4.0, 1000


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def timestep_embedding(t, dim=256):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], dim=-1)


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.n2 = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(D, 6 * D))

    def forward(self, x, c):
        s1, g1, a1, s2, g2, a2 = self.ada(c).chunk(6, dim=-1)
        b, n, _ = x.shape
        q, k, v = (
            self.qkv(modulate(self.n1(x), s1, g1)).view(b, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        )
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, D)
        x = x + a1.unsqueeze(1) * self.proj(y)
        return x + a2.unsqueeze(1) * self.mlp(modulate(self.n2(x), s2, g2))


class DiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Conv2d(4, D, PATCH, stride=PATCH)
        self.t_mlp = nn.Sequential(nn.Linear(256, D), nn.SiLU(), nn.Linear(D, D))
        self.y_emb = nn.Embedding(CLASSES + 1, D)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(D, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(D, 2 * D))
        self.out = nn.Linear(D, PATCH * PATCH * 4)

    def forward(self, x, t, y):
        b, _, h, w = x.shape
        pos = sincos_2d(h // PATCH, w // PATCH, x.device, x.dtype)
        z = self.embed(x).flatten(2).transpose(1, 2) + pos
        c = self.t_mlp(timestep_embedding(t).to(x.dtype)) + self.y_emb(y)
        for blk in self.blocks:
            z = blk(z, c)
        shift, scale = self.ada(c).chunk(2, dim=-1)
        z = self.out(modulate(self.norm(z), shift, scale))
        z = z.view(b, h // PATCH, w // PATCH, PATCH, PATCH, 4).permute(0, 5, 1, 3, 2, 4)
        return z.reshape(b, 4, h, w)


def sincos_2d(gh, gw, dev, dt):
    q = D // 4
    omega = 1.0 / 10000 ** (torch.arange(q, device=dev, dtype=torch.float32) / q)
    yy, xx = torch.meshgrid(
        torch.arange(gh, device=dev, dtype=torch.float32),
        torch.arange(gw, device=dev, dtype=torch.float32),
        indexing="ij",
    )
    oy, ox = yy.flatten()[:, None] * omega, xx.flatten()[:, None] * omega
    return torch.cat([oy.sin(), oy.cos(), ox.sin(), ox.cos()], dim=1).to(dt)


def decoder():
    layers = [nn.Conv2d(4, CH[0], 3, padding=1)]
    prev = CH[0]
    for ch in CH:
        layers += [
            nn.Upsample(scale_factor=2),
            nn.Conv2d(prev, ch, 3, padding=1),
            nn.GroupNorm(min(32, ch), ch),
            nn.SiLU(),
        ]
        prev = ch
    layers.append(nn.Conv2d(prev, 3, 3, padding=1))
    return nn.Sequential(*layers)


betas = torch.linspace(1e-4, 0.02, T_TRAIN, dtype=torch.float64)
alphas_cum = torch.cumprod(1 - betas, 0).float()

model = DiT().to(device, dtype).eval()
dec = decoder().to(device, dtype).eval()
report("DiT and decoder weights")


class Sampler:
    """Static tensors of one resolution and the two callables the graphs capture."""

    def __init__(self, n, lat):
        self.x = torch.randn(n, 4, lat, lat, device=device, dtype=dtype)
        self.t = torch.zeros(2 * n, dtype=torch.long, device=device)
        self.coef = torch.ones(
            4, device=device, dtype=torch.float32
        )  # sqrt(a), sqrt(1-a), sqrt(a'), sqrt(1-a')
        labels = torch.randint(0, CLASSES, (n,), device=device)
        self.y = torch.cat([labels, torch.full_like(labels, CLASSES)])
        self.img = None

    def step(self):
        eps = model(torch.cat([self.x, self.x]), self.t, self.y)
        e_c, e_u = eps.chunk(2)
        e = (e_u + GUIDANCE * (e_c - e_u)).float()
        x0 = (self.x.float() - self.coef[1] * e) / self.coef[0]
        self.x.copy_(self.coef[2] * x0 + self.coef[3] * e)

    def decode(self):
        return dec(self.x / 0.18215)

    def set_step(self, i, steps):
        ts = torch.linspace(T_TRAIN - 1, 0, steps + 1).long()
        a, a_prev = alphas_cum[ts[i]], alphas_cum[ts[i + 1]] if i + 1 < steps else torch.tensor(1.0)
        self.t.fill_(int(ts[i]))
        self.coef.copy_(torch.stack([a.sqrt(), (1 - a).sqrt(), a_prev.sqrt(), (1 - a_prev).sqrt()]))


def capture(s, pool):
    """Warm both callables up on a side stream, then capture the step graph and the decoder graph into
    `pool` (a handle, or None for a fresh pool that the decoder graph then shares)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            s.step()
            s.decode()
    torch.cuda.current_stream().wait_stream(side)
    g_step, g_dec = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g_step, pool=pool):
        s.step()
    with torch.cuda.graph(g_dec, pool=pool if pool is not None else g_step.pool()):
        s.img = s.decode()
    return g_step, g_dec


def run(s, graphs, steps):
    for i in range(steps):
        s.set_step(i, steps)
        if graphs:
            graphs[0].replay()
        else:
            s.step()
    if graphs:
        graphs[1].replay()
        img = s.img
    else:
        img = s.decode()
    return img.float().clamp(-1, 1).cpu()


graphed = device == "cuda"
with torch.no_grad():
    s = Sampler(IMAGES, LAT)
    graphs = capture(s, torch.cuda.graph_pool_handle()) if graphed else None
report("side-stream warm-up, two graphs captured into one graph_pool_handle")

with torch.no_grad():
    for rnd in range(2):
        s.x.copy_(torch.randn_like(s.x))
        imgs = run(s, graphs, STEPS)
        print(f"round {rnd}: images {tuple(imgs.shape)} mean {imgs.mean().item():.4f}")
report("two rounds of step replays and a decoder replay")

del graphs, s
if device == "cuda":
    torch.cuda.empty_cache()
with torch.no_grad():
    s2 = Sampler(IMAGES2, LAT2)
    graphs2 = capture(s2, None) if graphed else None
    imgs = run(s2, graphs2, STEPS2)
print(f"second resolution: images {tuple(imgs.shape)}")
if device == "cuda":
    stats = torch.cuda.memory_stats()
    keys = (
        "segment.all.current",
        "active_bytes.all.current",
        "inactive_split_bytes.all.current",
        "num_alloc_retries",
    )
    print({k: stats[k] for k in keys})
report("second pair sharing the step graph's pool")

del graphs2, s2, imgs
if device == "cuda":
    torch.cuda.empty_cache()
with torch.no_grad():
    s3 = Sampler(4, LAT)
    imgs = run(s3, None, 10)
print(f"eager: images {tuple(imgs.shape)}")
report("graphs released, eager sampling")
