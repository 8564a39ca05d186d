"""A DDPM training step as openai/improved-diffusion (unet.py, gaussian_diffusion.py) writes it, by
hand: a UNet of 128 base channels, channel multipliers (1, 2, 2, 2), two ResBlocks a level (GroupNorm(32),
SiLU, 3 x 3 convolutions, the time embedding projected and added, dropout 0.1, a 1 x 1 skip where the
widths differ), self-attention blocks (4 heads, qkv by a 1 x 1 Conv1d, QKVAttention's einsum with the
1/sqrt(sqrt(ch)) scale on both sides) at 16 x 16 and 8 x 8, strided-conv downsampling and
nearest-upsample + conv upsampling, the middle ResBlock/attention/ResBlock, a zero-initialised output
conv. Sinusoidal timestep embeddings (timestep_embedding with max_period 10,000) through a 512-wide
SiLU MLP. Linear beta schedule of 1,000 steps (numpy float64), q_sample by gathering sqrt(alphas_cumprod)
at uniform random timesteps, the epsilon-prediction MSE. Batch 48 of 3 x 64 x 64 images, bf16
autocast, AdamW (lr 1e-4, weight decay 0.01), gradient clipping at 1.0, an EMA copy made by
copy.deepcopy and updated with torch.lerp_ (rate 0.9999) after each step. Phases: three training steps
(each its own phase), then the EMA model's validation loss over two batches under no_grad and
autocast (4 phases after the model's creation)."""

import copy
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16401)
if SMALL:
    CH, MULT, NRES, ATTN_RES, B, RES, STEPS = 32, (1, 2), 1, (8,), 4, 16, 3
else:
    CH, MULT, NRES, ATTN_RES, B, RES, STEPS = 128, (1, 2, 2, 2), 2, (16, 8), 48, 64, 3
T = 1000
device = "cuda" if torch.cuda.is_available() else "cpu"


def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half).to(
        device=timesteps.device
    )
    args = timesteps[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


def zero_module(module):
    for p in module.parameters():
        p.detach().zero_()
    return module


def normalization(channels):
    return nn.GroupNorm(32 if channels >= 32 else 8, channels)


class ResBlock(nn.Module):
    def __init__(self, channels, emb_channels, dropout, out_channels=None):
        super().__init__()
        self.out_channels = out_channels or channels
        self.in_layers = nn.Sequential(
            normalization(channels), nn.SiLU(), nn.Conv2d(channels, self.out_channels, 3, padding=1)
        )
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, self.out_channels))
        self.out_layers = nn.Sequential(
            normalization(self.out_channels),
            nn.SiLU(),
            nn.Dropout(p=dropout),
            zero_module(nn.Conv2d(self.out_channels, self.out_channels, 3, padding=1)),
        )
        if self.out_channels == channels:
            self.skip_connection = nn.Identity()
        else:
            self.skip_connection = nn.Conv2d(channels, self.out_channels, 1)

    def forward(self, x, emb):
        h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)
        while len(emb_out.shape) < len(h.shape):
            emb_out = emb_out[..., None]
        h = h + emb_out
        h = self.out_layers(h)
        return self.skip_connection(x) + h


class QKVAttention(nn.Module):
    def __init__(self, n_heads):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, qkv):
        bs, width, length = qkv.shape
        ch = width // (3 * self.n_heads)
        q, k, v = qkv.reshape(bs * self.n_heads, ch * 3, length).split(ch, dim=1)
        scale = 1 / math.sqrt(math.sqrt(ch))
        weight = torch.einsum("bct,bcs->bts", q * scale, k * scale)
        weight = torch.softmax(weight.float(), dim=-1).type(weight.dtype)
        a = torch.einsum("bts,bcs->bct", weight, v)
        return a.reshape(bs, -1, length)


class AttentionBlock(nn.Module):
    def __init__(self, channels, num_heads=4):
        super().__init__()
        self.norm = normalization(channels)
        self.qkv = nn.Conv1d(channels, channels * 3, 1)
        self.attention = QKVAttention(num_heads)
        self.proj_out = zero_module(nn.Conv1d(channels, channels, 1))

    def forward(self, x):
        b, c, *spatial = x.shape
        x = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(x))
        h = self.attention(qkv)
        h = self.proj_out(h)
        return (x + h).reshape(b, c, *spatial)


class Downsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.op = nn.Conv2d(ch, ch, 3, stride=2, padding=1)

    def forward(self, x):
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        return self.conv(x)


class TimestepEmbedSequential(nn.Sequential):
    def forward(self, x, emb):
        for layer in self:
            if isinstance(layer, ResBlock):
                x = layer(x, emb)
            else:
                x = layer(x)
        return x


class UNetModel(nn.Module):
    def __init__(
        self,
        in_channels=3,
        model_channels=128,
        out_channels=3,
        num_res_blocks=2,
        attention_resolutions=(16, 8),
        dropout=0.1,
        channel_mult=(1, 2, 2, 2),
        image_size=64,
    ):
        super().__init__()
        self.model_channels = model_channels
        time_embed_dim = model_channels * 4
        self.time_embed = nn.Sequential(
            nn.Linear(model_channels, time_embed_dim), nn.SiLU(), nn.Linear(time_embed_dim, time_embed_dim)
        )
        self.input_blocks = nn.ModuleList(
            [TimestepEmbedSequential(nn.Conv2d(in_channels, model_channels, 3, padding=1))]
        )
        input_block_chans = [model_channels]
        ch = model_channels
        res = image_size
        for level, mult in enumerate(channel_mult):
            for _ in range(num_res_blocks):
                layers = [ResBlock(ch, time_embed_dim, dropout, out_channels=mult * model_channels)]
                ch = mult * model_channels
                if res in attention_resolutions:
                    layers.append(AttentionBlock(ch))
                self.input_blocks.append(TimestepEmbedSequential(*layers))
                input_block_chans.append(ch)
            if level != len(channel_mult) - 1:
                self.input_blocks.append(TimestepEmbedSequential(Downsample(ch)))
                input_block_chans.append(ch)
                res //= 2
        self.middle_block = TimestepEmbedSequential(
            ResBlock(ch, time_embed_dim, dropout), AttentionBlock(ch), ResBlock(ch, time_embed_dim, dropout)
        )
        self.output_blocks = nn.ModuleList([])
        for level, mult in list(enumerate(channel_mult))[::-1]:
            for i in range(num_res_blocks + 1):
                layers = [
                    ResBlock(
                        ch + input_block_chans.pop(),
                        time_embed_dim,
                        dropout,
                        out_channels=model_channels * mult,
                    )
                ]
                ch = model_channels * mult
                if res in attention_resolutions:
                    layers.append(AttentionBlock(ch))
                if level and i == num_res_blocks:
                    layers.append(Upsample(ch))
                    res *= 2
                self.output_blocks.append(TimestepEmbedSequential(*layers))
        self.out = nn.Sequential(
            normalization(ch), nn.SiLU(), zero_module(nn.Conv2d(model_channels, out_channels, 3, padding=1))
        )

    def forward(self, x, timesteps):
        hs = []
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels))
        h = x
        for module in self.input_blocks:
            h = module(h, emb)
            hs.append(h)
        h = self.middle_block(h, emb)
        for module in self.output_blocks:
            cat_in = torch.cat([h, hs.pop()], dim=1)
            h = module(cat_in, emb)
        return self.out(h)


betas = np.linspace(0.0001, 0.02, T, dtype=np.float64)
alphas_cumprod = np.cumprod(1.0 - betas, axis=0)
sqrt_ac = torch.from_numpy(np.sqrt(alphas_cumprod)).float().to(device)
sqrt_1mac = torch.from_numpy(np.sqrt(1.0 - alphas_cumprod)).float().to(device)


def q_sample(x_start, t, noise):
    return sqrt_ac[t][:, None, None, None] * x_start + sqrt_1mac[t][:, None, None, None] * noise


def training_losses(model, x_start, t):
    noise = torch.randn_like(x_start)
    x_t = q_sample(x_start, t, noise)
    model_output = model(x_t, t)
    return ((noise - model_output.float()) ** 2).mean(dim=[1, 2, 3])


model = UNetModel(
    model_channels=CH, num_res_blocks=NRES, attention_resolutions=ATTN_RES, channel_mult=MULT, image_size=RES
).to(device)
ema = copy.deepcopy(model).eval().requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
g = torch.Generator().manual_seed(16401)
data = torch.rand(STEPS * B, 3, RES, RES, generator=g) * 2 - 1
if device == "cuda":
    print(f"params {sum(p.numel() for p in model.parameters())} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = data[step * B : (step + 1) * B].to(device, non_blocking=True)
    t = torch.randint(0, T, (B,), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        losses = training_losses(model, x, t)
    loss = losses.mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        for p_ema, p in zip(ema.parameters(), model.parameters(), strict=True):
            p_ema.lerp_(p, 1 - 0.9999)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} gn {gn.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del losses, loss
val = []
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for i in range(2):
        x = torch.rand(B, 3, RES, RES, generator=g).mul_(2).sub_(1).to(device)
        t = torch.full((B,), 250 * (i + 1), device=device, dtype=torch.long)
        val.append(training_losses(ema, x, t).mean())
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"val {torch.stack(val).mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
