"""A DDPM UNet as lucidrains' denoising-diffusion-pytorch writes it (Unet: a 7 x 7 init conv,
ResnetBlocks of weight-standardised-free Conv2d 3 x 3 + GroupNorm(8) + SiLU with the sinusoidal
time embedding's scale and shift, LinearAttention at every resolution and full Attention in the
middle, Downsample by pixel-unshuffle + 1 x 1 conv, Upsample by nearest + 3 x 3 conv; dim 64,
dim_mults (1, 2, 4, 8)) trained on aspect-ratio buckets (SDXL-style multi-aspect training: 64 x 64 at
batch 64, 96 x 64 at batch 48, 128 x 128 at batch 24, each bucket another set of shapes in the
cache) under an allocator configured with a combination of knobs before torch is imported:
PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6,max_split_size_mb:128,
roundup_power2_divisions:[128:2,>:4] and torch.cuda.set_per_process_memory_fraction(0.1), so that
the garbage collection of cached blocks runs once reserved memory passes 60% of the cap. bf16
autocast, Adam (lr 8e-5), an EMA copy of the model (ema_pytorch's lerp_ of each parameter, beta
0.995), the v-free noise-prediction MSE over a linear 1,000-step beta schedule. Phases: the 64 x 64
bucket (2 steps); the 96 x 64 bucket (2 steps); the 128 x 128 bucket (2 steps);
torch.cuda.empty_cache() then DDIM sampling of 16 images at 128 x 128 in 10 steps with the EMA model
under inference_mode; 2 steps of the 64 x 96 bucket; 5 phases."""

import copy
import itertools
import math
import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "garbage_collection_threshold:0.6,max_split_size_mb:128,roundup_power2_divisions:[128:2,>:4]"
)

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16506)
if SMALL:
    DIM, MULTS, BUCKETS, SAMPLE_N, SAMPLE_RES, LAST = (
        8,
        (1, 2),
        ((16, 16, 4), (24, 16, 3), (32, 32, 2)),
        2,
        32,
        (16, 24, 3),
    )
else:
    DIM, MULTS = 64, (1, 2, 4, 8)
    BUCKETS, SAMPLE_N, SAMPLE_RES, LAST = ((64, 64, 64), (96, 64, 48), (128, 128, 24)), 16, 128, (64, 96, 48)
FRACTION = 0.1
T = 1000
device = "cuda" if torch.cuda.is_available() else "cpu"
if device == "cuda":
    torch.cuda.set_per_process_memory_fraction(FRACTION)


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half = self.dim // 2
        emb = math.log(10000) / (half - 1)
        emb = torch.exp(torch.arange(half, device=x.device) * -emb)
        emb = x[:, None] * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.g = nn.Parameter(torch.ones(1, dim, 1, 1))

    def forward(self, x):
        return F.normalize(x, dim=1) * self.g * (x.shape[1] ** 0.5)


class Block(nn.Module):
    def __init__(self, dim, dim_out, groups=8):
        super().__init__()
        self.proj = nn.Conv2d(dim, dim_out, 3, padding=1)
        self.norm = nn.GroupNorm(groups, dim_out)
        self.act = nn.SiLU()

    def forward(self, x, scale_shift=None):
        x = self.norm(self.proj(x))
        if scale_shift is not None:
            scale, shift = scale_shift
            x = x * (scale + 1) + shift
        return self.act(x)


class ResnetBlock(nn.Module):
    def __init__(self, dim, dim_out, time_emb_dim):
        super().__init__()
        self.mlp = nn.Sequential(nn.SiLU(), nn.Linear(time_emb_dim, dim_out * 2))
        self.block1 = Block(dim, dim_out)
        self.block2 = Block(dim_out, dim_out)
        self.res_conv = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()

    def forward(self, x, time_emb):
        t = self.mlp(time_emb)[:, :, None, None]
        h = self.block1(x, scale_shift=t.chunk(2, dim=1))
        h = self.block2(h)
        return h + self.res_conv(x)


class LinearAttention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=32):
        super().__init__()
        self.scale, self.heads = dim_head**-0.5, heads
        hidden = dim_head * heads
        self.norm = RMSNorm(dim)
        self.to_qkv = nn.Conv2d(dim, hidden * 3, 1, bias=False)
        self.to_out = nn.Sequential(nn.Conv2d(hidden, dim, 1), RMSNorm(dim))

    def forward(self, x):
        b, _, h, w = x.shape
        x = self.norm(x)
        q, k, v = (t.reshape(b, self.heads, -1, h * w) for t in self.to_qkv(x).chunk(3, dim=1))
        q = q.softmax(dim=-2) * self.scale
        k = k.softmax(dim=-1)
        context = torch.einsum("bhdn,bhen->bhde", k, v)
        out = torch.einsum("bhde,bhdn->bhen", context, q)
        return self.to_out(out.reshape(b, -1, h, w))


class Attention(nn.Module):
    def __init__(self, dim, heads=4, dim_head=32):
        super().__init__()
        self.heads = heads
        hidden = dim_head * heads
        self.norm = RMSNorm(dim)
        self.to_qkv = nn.Conv2d(dim, hidden * 3, 1, bias=False)
        self.to_out = nn.Conv2d(hidden, dim, 1)

    def forward(self, x):
        b, _, h, w = x.shape
        x = self.norm(x)
        q, k, v = (
            t.reshape(b, self.heads, -1, h * w).transpose(-1, -2) for t in self.to_qkv(x).chunk(3, dim=1)
        )
        out = F.scaled_dot_product_attention(q, k, v)
        return self.to_out(out.transpose(-1, -2).reshape(b, -1, h, w))


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


def Downsample(dim, dim_out):
    return nn.Sequential(nn.PixelUnshuffle(2), nn.Conv2d(dim * 4, dim_out, 1))


def Upsample(dim, dim_out):
    return nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(dim, dim_out, 3, padding=1))


class Unet(nn.Module):
    def __init__(self, dim, dim_mults, channels=3):
        super().__init__()
        self.init_conv = nn.Conv2d(channels, dim, 7, padding=3)
        dims = [dim, *(dim * m for m in dim_mults)]
        in_out = list(itertools.pairwise(dims))
        time_dim = dim * 4
        self.time_mlp = nn.Sequential(
            SinusoidalPosEmb(dim), nn.Linear(dim, time_dim), nn.GELU(), nn.Linear(time_dim, time_dim)
        )
        self.downs, self.ups = nn.ModuleList(), nn.ModuleList()
        for ind, (d_in, d_out) in enumerate(in_out):
            last = ind == len(in_out) - 1
            self.downs.append(
                nn.ModuleList(
                    [
                        ResnetBlock(d_in, d_in, time_dim),
                        ResnetBlock(d_in, d_in, time_dim),
                        Residual(LinearAttention(d_in)),
                        Downsample(d_in, d_out) if not last else nn.Conv2d(d_in, d_out, 3, padding=1),
                    ]
                )
            )
        mid = dims[-1]
        self.mid_block1 = ResnetBlock(mid, mid, time_dim)
        self.mid_attn = Residual(Attention(mid))
        self.mid_block2 = ResnetBlock(mid, mid, time_dim)
        for ind, (d_in, d_out) in enumerate(reversed(in_out)):
            last = ind == len(in_out) - 1
            self.ups.append(
                nn.ModuleList(
                    [
                        ResnetBlock(d_out + d_in, d_out, time_dim),
                        ResnetBlock(d_out + d_in, d_out, time_dim),
                        Residual(LinearAttention(d_out)),
                        Upsample(d_out, d_in) if not last else nn.Conv2d(d_out, d_in, 3, padding=1),
                    ]
                )
            )
        self.final_res_block = ResnetBlock(dim * 2, dim, time_dim)
        self.final_conv = nn.Conv2d(dim, channels, 1)

    def forward(self, x, time):
        x = self.init_conv(x)
        r = x.clone()
        t = self.time_mlp(time)
        h = []
        for block1, block2, attn, downsample in self.downs:
            x = block1(x, t)
            h.append(x)
            x = block2(x, t)
            x = attn(x)
            h.append(x)
            x = downsample(x)
        x = self.mid_block1(x, t)
        x = self.mid_attn(x)
        x = self.mid_block2(x, t)
        for block1, block2, attn, upsample in self.ups:
            x = torch.cat((x, h.pop()), dim=1)
            x = block1(x, t)
            x = torch.cat((x, h.pop()), dim=1)
            x = block2(x, t)
            x = attn(x)
            x = upsample(x)
        x = torch.cat((x, r), dim=1)
        x = self.final_res_block(x, t)
        return self.final_conv(x)


model = Unet(DIM, MULTS).to(device)
ema_model = copy.deepcopy(model).eval().requires_grad_(False)
optimizer = torch.optim.Adam(model.parameters(), lr=8e-5, betas=(0.9, 0.99))
betas = torch.linspace(1e-4, 0.02, T, dtype=torch.float64)
alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).float().to(device)


def train_steps(h, w, batch, steps):
    model.train()
    for _ in range(steps):
        x0 = torch.rand(batch, 3, h, w, device=device) * 2 - 1
        t = torch.randint(0, T, (batch,), device=device)
        noise = torch.randn_like(x0)
        a = alphas_cumprod[t].view(-1, 1, 1, 1)
        x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
        with torch.autocast(device, dtype=torch.bfloat16):
            pred = model(x_t, t)
        loss = F.mse_loss(pred.float(), noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for ema_p, p in zip(ema_model.parameters(), model.parameters(), strict=True):
                ema_p.lerp_(p, 1 - 0.995)
    return loss.item()


def report(name):
    if device == "cuda":
        print(
            f"{name}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


for h, w, batch in BUCKETS:
    print(f"bucket {h}x{w} batch {batch} loss {train_steps(h, w, batch, 2):.4f}")
    report(f"bucket {h}x{w}")

if device == "cuda":
    torch.cuda.empty_cache()
with torch.inference_mode():
    img = torch.randn(SAMPLE_N, 3, SAMPLE_RES, SAMPLE_RES, device=device)
    times = torch.linspace(T - 1, 0, 11).long().tolist()
    for t_now, t_next in itertools.pairwise(times):
        tt = torch.full((SAMPLE_N,), t_now, device=device, dtype=torch.long)
        with torch.autocast(device, dtype=torch.bfloat16):
            eps = ema_model(img, tt).float()
        a_now, a_next = alphas_cumprod[t_now], alphas_cumprod[t_next]
        x0 = ((img - (1 - a_now).sqrt() * eps) / a_now.sqrt()).clamp(-1, 1)
        img = a_next.sqrt() * x0 + (1 - a_next).sqrt() * eps
print(f"sampled {tuple(img.shape)} mean {img.mean().item():.4f}")
report("ddim sample")

h, w, batch = LAST
print(f"bucket {h}x{w} batch {batch} loss {train_steps(h, w, batch, 2):.4f}")
report(f"bucket {h}x{w} again")
