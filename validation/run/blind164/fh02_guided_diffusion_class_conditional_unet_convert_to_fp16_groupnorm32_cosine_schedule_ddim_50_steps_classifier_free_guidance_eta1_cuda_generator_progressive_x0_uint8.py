"""Class-conditional sampling as openai/guided-diffusion and improved-diffusion write it, with
classifier-free guidance (Ho and Salimans): a class-conditional UNet (128 base channels, multipliers
(1, 2, 3, 4), two ResBlocks a level, attention at 32, 16 and 8 with 64-channel heads, GroupNorm32 that
normalises in fp32, a label embedding of 1,000 classes plus the null class) whose blocks are converted to
fp16 as convert_to_fp16 does (conv weights halved, the time-embedding MLP kept fp32, h cast to the
blocks' dtype); cosine noise schedule (1,000 steps, numpy float64) respaced to 50 DDIM steps. Phases:
the EMA weights loaded from a state_dict on the host; 50 deterministic DDIM steps (eta 0) for 32 images
of 3 x 64 x 64 at guidance scale 4 with conditional and null-class halves in one batch of 64 under
torch.no_grad; 50 DDIM steps with eta 1.0 drawing noise from a seeded CUDA generator and keeping every
predicted x0 (progressive mode, on the device); the uint8 conversion of the samples and a grid of the
progress copied to the host under torch.inference_mode (4 phases after the model's creation)."""

import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16402)
if SMALL:
    CH, MULT, NRES, ATTN_RES, B, RES, NSTEPS, NCLS = 32, (1, 2), 1, (8,), 2, 16, 5, 10
else:
    CH, MULT, NRES, ATTN_RES, B, RES, NSTEPS, NCLS = 128, (1, 2, 3, 4), 2, (32, 16, 8), 32, 64, 50, 1000
T = 1000
GUIDANCE = 4.0
device = "cuda" if torch.cuda.is_available() else "cpu"
use_fp16 = device == "cuda"


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


class GroupNorm32(nn.GroupNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


def normalization(channels):
    return GroupNorm32(32 if channels >= 32 else 8, channels)


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
    def __init__(self, channels, num_head_channels=64):
        super().__init__()
        num_heads = channels // num_head_channels
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
        attention_resolutions=(32, 16, 8),
        dropout=0.0,
        channel_mult=(1, 2, 3, 4),
        image_size=64,
        num_classes=1000,
    ):
        super().__init__()
        self.model_channels = model_channels
        self.dtype = torch.float32
        time_embed_dim = model_channels * 4
        self.time_embed = nn.Sequential(
            nn.Linear(model_channels, time_embed_dim), nn.SiLU(), nn.Linear(time_embed_dim, time_embed_dim)
        )
        self.label_emb = nn.Embedding(num_classes + 1, time_embed_dim)
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
                    layers.append(AttentionBlock(ch, min(64, ch)))
                self.input_blocks.append(TimestepEmbedSequential(*layers))
                input_block_chans.append(ch)
            if level != len(channel_mult) - 1:
                self.input_blocks.append(TimestepEmbedSequential(Downsample(ch)))
                input_block_chans.append(ch)
                res //= 2
        self.middle_block = TimestepEmbedSequential(
            ResBlock(ch, time_embed_dim, dropout),
            AttentionBlock(ch, min(64, ch)),
            ResBlock(ch, time_embed_dim, dropout),
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
                    layers.append(AttentionBlock(ch, min(64, ch)))
                if level and i == num_res_blocks:
                    layers.append(Upsample(ch))
                    res *= 2
                self.output_blocks.append(TimestepEmbedSequential(*layers))
        self.out = nn.Sequential(
            normalization(ch), nn.SiLU(), zero_module(nn.Conv2d(model_channels, out_channels, 3, padding=1))
        )

    def convert_to_fp16(self):
        def convert_module_to_f16(m):
            if isinstance(m, (nn.Conv1d, nn.Conv2d)):
                m.weight.data = m.weight.data.half()
                if m.bias is not None:
                    m.bias.data = m.bias.data.half()

        self.input_blocks.apply(convert_module_to_f16)
        self.middle_block.apply(convert_module_to_f16)
        self.output_blocks.apply(convert_module_to_f16)
        self.dtype = torch.float16

    def forward(self, x, timesteps, y):
        hs = []
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels))
        emb = emb + self.label_emb(y)
        h = x.type(self.dtype)
        for module in self.input_blocks:
            h = module(h, emb)
            hs.append(h)
        h = self.middle_block(h, emb)
        for module in self.output_blocks:
            h = torch.cat([h, hs.pop()], dim=1)
            h = module(h, emb)
        h = h.type(x.dtype)
        return self.out(h)


def cosine_alphas_cumprod(num_steps, s=0.008):
    def alpha_bar(t):
        return math.cos((t + s) / (1 + s) * math.pi / 2) ** 2

    betas = [
        min(1 - alpha_bar((i + 1) / num_steps) / alpha_bar(i / num_steps), 0.999) for i in range(num_steps)
    ]
    return np.cumprod(1.0 - np.array(betas, dtype=np.float64))


alphas_cumprod = cosine_alphas_cumprod(T)
use_timesteps = list(range(0, T, T // NSTEPS))
ac = torch.from_numpy(alphas_cumprod[use_timesteps]).to(device)
ac_prev = torch.cat([torch.ones(1, dtype=torch.float64, device=device), ac[:-1]])

model = UNetModel(
    model_channels=CH,
    num_res_blocks=NRES,
    attention_resolutions=ATTN_RES,
    channel_mult=MULT,
    image_size=RES,
    num_classes=NCLS,
)
ema_state = {k: v.clone() for k, v in model.state_dict().items()}
model.to(device)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()
model.load_state_dict(ema_state)
if use_fp16:
    model.convert_to_fp16()
model.eval()
del ema_state
if device == "cuda":
    torch.cuda.synchronize()
    print(f"loaded peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def guided_eps(x, t_index, y):
    t = torch.full((x.shape[0],), use_timesteps[t_index], device=device, dtype=torch.long)
    x_in = torch.cat([x, x])
    t_in = torch.cat([t, t])
    y_in = torch.cat([y, torch.full_like(y, NCLS)])
    out = model(x_in, t_in, y_in)
    cond, uncond = out.float().chunk(2)
    return uncond + GUIDANCE * (cond - uncond)


def ddim_step(x, i, eps, eta, generator=None):
    a_t = ac[i].float()
    a_prev = ac_prev[i].float()
    pred_x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
    pred_x0 = pred_x0.clamp(-1, 1)
    eps = (x - a_t.sqrt() * pred_x0) / (1 - a_t).sqrt()
    sigma = eta * ((1 - a_prev) / (1 - a_t)).sqrt() * (1 - a_t / a_prev).sqrt()
    mean_pred = pred_x0 * a_prev.sqrt() + (1 - a_prev - sigma**2).sqrt() * eps
    if eta > 0 and i > 0:
        noise = torch.randn(x.shape, device=x.device, generator=generator)
        return mean_pred + sigma * noise, pred_x0
    return mean_pred, pred_x0


y = torch.randint(0, NCLS, (B,), device=device)
with torch.no_grad():
    x = torch.randn(B, 3, RES, RES, device=device)
    for i in reversed(range(NSTEPS)):
        eps = guided_eps(x, i, y)
        x, _ = ddim_step(x, i, eps, 0.0)
samples_a = x
if device == "cuda":
    torch.cuda.synchronize()
    print(f"ddim eta0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gen = torch.Generator(device=device).manual_seed(16402)
progress = []
with torch.no_grad():
    x = torch.randn(B, 3, RES, RES, device=device, generator=gen)
    for i in reversed(range(NSTEPS)):
        eps = guided_eps(x, i, y)
        x, pred_x0 = ddim_step(x, i, eps, 1.0, generator=gen)
        progress.append(pred_x0)
samples_b = x
if device == "cuda":
    torch.cuda.synchronize()
    print(f"ddim eta1 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    imgs = torch.cat([samples_a, samples_b])
    imgs = ((imgs + 1) * 127.5).clamp(0, 255).to(torch.uint8)
    imgs = imgs.permute(0, 2, 3, 1).contiguous().cpu().numpy()
    grid = torch.stack(progress[:: max(1, NSTEPS // 10)], dim=1)[:8]
    grid = ((grid + 1) * 127.5).clamp(0, 255).to(torch.uint8).cpu()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"images {imgs.shape} grid {tuple(grid.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
