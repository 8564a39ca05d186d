"""A text-conditioned latent-diffusion UNet as CompVis/stable-diffusion (ldm/modules/
diffusionmodules/openaimodel.py, ldm/modules/attention.py) writes it, trained as diffusers'
train_text_to_image.py does (v-prediction, min-SNR-5 loss weighting, an EMA kept by
torch._foreach ops as EMAModel does): 128 base channels, multipliers (1, 2, 4), two ResBlocks a level,
SpatialTransformers (GroupNorm, 1 x 1 proj_in, BasicTransformerBlock: LayerNorm, self-attention and
cross-attention to a 77 x 768 context by F.scaled_dot_product_attention with 64-channel heads, GEGLU
feed-forward, 1 x 1 proj_out) at every level and the middle, the ResBlocks and transformer blocks
under torch.utils.checkpoint (use_reentrant=False). Random 4 x 32 x 32 latents and random text
embeddings, a scaled-linear schedule of 1,000 steps, batch 32, 10% of the contexts zeroed for the
unconditional model by a seeded torch.rand mask. fp16 autocast with GradScaler, fused AdamW (lr 1e-4,
weight decay 1e-2), gradient clipping at 1.0 after unscale_. Phases: three training steps (each its own
phase), then 30 DDIM steps with classifier-free guidance 7.5 for 16 latents (conditional and
unconditional halves in one batch of 32) under no_grad and fp16 autocast with the EMA weights swapped in
by torch._foreach_copy_ (4 phases after the model's creation)."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16406)
if SMALL:
    CH, MULT, NRES, B, LAT, CTX_LEN, CTX_DIM, NS, NSTEPS = 32, (1, 2), 1, 4, 8, 7, 64, 2, 4
else:
    CH, MULT, NRES, B, LAT, CTX_LEN, CTX_DIM, NS, NSTEPS = 128, (1, 2, 4), 2, 32, 32, 77, 768, 16, 30
T = 1000
HEAD_CH = 64 if not SMALL else 16
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half).to(
        device=timesteps.device
    )
    args = timesteps[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def Normalize(c):
    return nn.GroupNorm(num_groups=32 if c >= 32 else 8, num_channels=c, eps=1e-6, affine=True)


class ResBlock(nn.Module):
    def __init__(self, channels, emb_channels, out_channels=None):
        super().__init__()
        self.out_channels = out_channels or channels
        self.in_layers = nn.Sequential(
            Normalize(channels), nn.SiLU(), nn.Conv2d(channels, self.out_channels, 3, padding=1)
        )
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, self.out_channels))
        self.out_layers = nn.Sequential(
            Normalize(self.out_channels),
            nn.SiLU(),
            nn.Dropout(0.0),
            nn.Conv2d(self.out_channels, self.out_channels, 3, padding=1),
        )
        nn.init.zeros_(self.out_layers[-1].weight)
        self.skip_connection = (
            nn.Identity() if self.out_channels == channels else nn.Conv2d(channels, self.out_channels, 1)
        )

    def _forward(self, x, emb):
        h = self.in_layers(x)
        h = h + self.emb_layers(emb).type(h.dtype)[:, :, None, None]
        h = self.out_layers(h)
        return self.skip_connection(x) + h

    def forward(self, x, emb):
        if self.training:
            return checkpoint(self._forward, x, emb, use_reentrant=False)
        return self._forward(x, emb)


class GEGLU(nn.Module):
    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out * 2)

    def forward(self, x):
        x, gate = self.proj(x).chunk(2, dim=-1)
        return x * F.gelu(gate)


class CrossAttention(nn.Module):
    def __init__(self, query_dim, context_dim=None, heads=8, dim_head=64):
        super().__init__()
        inner_dim = dim_head * heads
        context_dim = context_dim or query_dim
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k = nn.Linear(context_dim, inner_dim, bias=False)
        self.to_v = nn.Linear(context_dim, inner_dim, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, query_dim), nn.Dropout(0.0))

    def forward(self, x, context=None):
        h = self.heads
        context = x if context is None else context
        q, k, v = self.to_q(x), self.to_k(context), self.to_v(context)
        b = q.shape[0]
        q, k, v = (t.reshape(b, -1, h, t.shape[-1] // h).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v)
        out = out.transpose(1, 2).reshape(b, -1, h * out.shape[-1])
        return self.to_out(out)


class BasicTransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, d_head, context_dim):
        super().__init__()
        self.attn1 = CrossAttention(dim, heads=n_heads, dim_head=d_head)
        self.ff = nn.Sequential(GEGLU(dim, dim * 4), nn.Dropout(0.0), nn.Linear(dim * 4, dim))
        self.attn2 = CrossAttention(dim, context_dim=context_dim, heads=n_heads, dim_head=d_head)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.norm3 = nn.LayerNorm(dim)

    def _forward(self, x, context):
        x = self.attn1(self.norm1(x)) + x
        x = self.attn2(self.norm2(x), context=context) + x
        return self.ff(self.norm3(x)) + x

    def forward(self, x, context):
        if self.training:
            return checkpoint(self._forward, x, context, use_reentrant=False)
        return self._forward(x, context)


class SpatialTransformer(nn.Module):
    def __init__(self, in_channels, n_heads, d_head, context_dim):
        super().__init__()
        inner_dim = n_heads * d_head
        self.norm = Normalize(in_channels)
        self.proj_in = nn.Conv2d(in_channels, inner_dim, kernel_size=1)
        self.transformer_blocks = nn.ModuleList(
            [BasicTransformerBlock(inner_dim, n_heads, d_head, context_dim)]
        )
        self.proj_out = nn.Conv2d(inner_dim, in_channels, kernel_size=1)
        nn.init.zeros_(self.proj_out.weight)

    def forward(self, x, context):
        b, c, h, w = x.shape
        x_in = x
        x = self.proj_in(self.norm(x))
        x = x.flatten(2).transpose(1, 2)
        for block in self.transformer_blocks:
            x = block(x, context)
        x = x.transpose(1, 2).reshape(b, c, h, w)
        return self.proj_out(x) + x_in


class TimestepEmbedSequential(nn.Sequential):
    def forward(self, x, emb, context):
        for layer in self:
            if isinstance(layer, ResBlock):
                x = layer(x, emb)
            elif isinstance(layer, SpatialTransformer):
                x = layer(x, context)
            else:
                x = layer(x)
        return x


class Upsample(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class UNetModel(nn.Module):
    def __init__(
        self,
        in_channels=4,
        model_channels=128,
        out_channels=4,
        num_res_blocks=2,
        channel_mult=(1, 2, 4),
        context_dim=768,
        num_head_channels=64,
    ):
        super().__init__()
        self.model_channels = model_channels
        ted = model_channels * 4
        self.time_embed = nn.Sequential(nn.Linear(model_channels, ted), nn.SiLU(), nn.Linear(ted, ted))
        self.input_blocks = nn.ModuleList(
            [TimestepEmbedSequential(nn.Conv2d(in_channels, model_channels, 3, padding=1))]
        )
        chans = [model_channels]
        ch = model_channels
        for level, mult in enumerate(channel_mult):
            for _ in range(num_res_blocks):
                layers = [ResBlock(ch, ted, mult * model_channels)]
                ch = mult * model_channels
                layers.append(SpatialTransformer(ch, ch // num_head_channels, num_head_channels, context_dim))
                self.input_blocks.append(TimestepEmbedSequential(*layers))
                chans.append(ch)
            if level != len(channel_mult) - 1:
                self.input_blocks.append(TimestepEmbedSequential(nn.Conv2d(ch, ch, 3, stride=2, padding=1)))
                chans.append(ch)
        self.middle_block = TimestepEmbedSequential(
            ResBlock(ch, ted),
            SpatialTransformer(ch, ch // num_head_channels, num_head_channels, context_dim),
            ResBlock(ch, ted),
        )
        self.output_blocks = nn.ModuleList([])
        for level, mult in list(enumerate(channel_mult))[::-1]:
            for i in range(num_res_blocks + 1):
                layers = [ResBlock(ch + chans.pop(), ted, model_channels * mult)]
                ch = model_channels * mult
                layers.append(SpatialTransformer(ch, ch // num_head_channels, num_head_channels, context_dim))
                if level and i == num_res_blocks:
                    layers.append(Upsample(ch))
                self.output_blocks.append(TimestepEmbedSequential(*layers))
        self.out = nn.Sequential(
            Normalize(ch), nn.SiLU(), nn.Conv2d(model_channels, out_channels, 3, padding=1)
        )
        nn.init.zeros_(self.out[-1].weight)

    def forward(self, x, timesteps, context):
        hs = []
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels))
        h = x
        for module in self.input_blocks:
            h = module(h, emb, context)
            hs.append(h)
        h = self.middle_block(h, emb, context)
        for module in self.output_blocks:
            h = torch.cat([h, hs.pop()], dim=1)
            h = module(h, emb, context)
        return self.out(h)


betas = torch.linspace(0.00085**0.5, 0.012**0.5, T, dtype=torch.float64) ** 2
alphas_cumprod = torch.cumprod(1.0 - betas, dim=0).float().to(device)

unet = UNetModel(
    model_channels=CH, num_res_blocks=NRES, channel_mult=MULT, context_dim=CTX_DIM, num_head_channels=HEAD_CH
).to(device)
params = [p for p in unet.parameters() if p.requires_grad]
ema_params = [p.detach().clone() for p in params]
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-2, fused=device == "cuda")
scaler = torch.amp.GradScaler("cuda", enabled=amp)
g = torch.Generator().manual_seed(16406)
latents_all = torch.randn(3 * B, 4, LAT, LAT, generator=g) * 0.18215
text_all = torch.randn(3 * B, CTX_LEN, CTX_DIM, generator=g)
if device == "cuda":
    print(f"params {sum(p.numel() for p in params)} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


unet.train()
for step in range(3):
    latents = latents_all[step * B : (step + 1) * B].to(device)
    text = text_all[step * B : (step + 1) * B].to(device)
    drop = torch.rand(B, device=device) < 0.1
    text = torch.where(drop[:, None, None], torch.zeros_like(text), text)
    noise = torch.randn_like(latents)
    timesteps = torch.randint(0, T, (B,), device=device).long()
    a = alphas_cumprod[timesteps].sqrt()[:, None, None, None]
    s = (1 - alphas_cumprod[timesteps]).sqrt()[:, None, None, None]
    noisy = a * latents + s * noise
    target = a * noise - s * latents
    snr = alphas_cumprod[timesteps] / (1 - alphas_cumprod[timesteps])
    mse_loss_weights = torch.stack([snr, 5.0 * torch.ones_like(timesteps)], dim=1).min(dim=1)[0] / (snr + 1)
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=amp):
        model_pred = unet(noisy, timesteps, text)
    loss = F.mse_loss(model_pred.float(), target.float(), reduction="none")
    loss = loss.mean(dim=list(range(1, len(loss.shape)))) * mse_loss_weights
    loss = loss.mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(params, 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        diff = torch._foreach_sub(ema_params, params)
        torch._foreach_mul_(diff, 1 - 0.9999)
        torch._foreach_sub_(ema_params, diff)
        del diff
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} gn {gn.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del model_pred, loss, noisy, target, latents, text
unet.eval()
backup = [p.detach().clone() for p in params]
torch._foreach_copy_([p.data for p in params], ema_params)
step_ratio = T // NSTEPS
ts = list(range(0, T, step_ratio))[::-1]
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.float16, enabled=amp):
    cond = torch.randn(NS, CTX_LEN, CTX_DIM, device=device)
    ctx = torch.cat([torch.zeros_like(cond), cond])
    x = torch.randn(NS, 4, LAT, LAT, device=device)
    for t in ts:
        tt = torch.full((2 * NS,), t, device=device, dtype=torch.long)
        v = unet(torch.cat([x, x]), tt, ctx).float()
        v_uncond, v_cond = v.chunk(2)
        v = v_uncond + 7.5 * (v_cond - v_uncond)
        a_t = alphas_cumprod[t]
        a_prev = alphas_cumprod[t - step_ratio] if t - step_ratio >= 0 else torch.tensor(1.0, device=device)
        x0 = a_t.sqrt() * x - (1 - a_t).sqrt() * v
        eps = a_t.sqrt() * v + (1 - a_t).sqrt() * x
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    latents_out = (x / 0.18215).cpu()
torch._foreach_copy_([p.data for p in params], backup)
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"sample {tuple(latents_out.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
