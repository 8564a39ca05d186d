"""ControlNet training on a Stable-Diffusion-style UNet written by hand, the way the ControlNet paper's and
diffusers' train_controlnet.py set it up: the UNet (3 levels, 192/384/768 channels, two ResBlocks with a
cross-attention SpatialTransformer per level, GEGLU feed-forward, GroupNorm 32) and a CLIP text encoder
(transformers CLIPTextModel from a CLIPTextConfig of SD 1.5's size) are frozen and kept in fp16; the
ControlNet is a `copy.deepcopy` of the UNet's encoder half (conv_in, time embedding, down blocks, mid block)
in fp32, plus a hint encoder (8 convolutions taking a 3 x 512 x 512 condition image to the 64 x 64 latent
grid) and zero-initialised 1 x 1 convolutions on every skip and the mid block, whose outputs are added to the
frozen UNet's skips. Noise and timesteps come from a `torch.Generator(device="cuda")`; 10 % of the captions
are swapped for the empty prompt's embedding (`torch.where` on a drop mask) for classifier-free guidance.

Phases: 0 the models, AdamW on the ControlNet (foreach), GradScaler, an fp32 EMA copy of the ControlNet;
1 three training steps at batch 8 (latents 4 x 64 x 64) under fp16 autocast with GradScaler, clip_grad_norm_
and an EMA update (`lerp_` per parameter); 2 a validation loss at 4 fixed timesteps with the EMA ControlNet
under no_grad + fp16 autocast; 3 DDIM sampling, 20 steps, guidance 7.5 (the batch doubled by `torch.cat`
into unconditional and conditional halves), 4 images, the EMA ControlNet cast to fp16, under inference_mode;
4 two ControlNets at once (the EMA one and the trained one, their residuals summed with scales 1.0 and 0.5)
for 2 images at 768 x 768 (latents 96 x 96), 10 DDIM steps."""

import copy
import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import CLIPTextConfig, CLIPTextModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3401)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
half = torch.float16 if amp else torch.float32
if SMALL:
    C0, TXT_LAYERS, B, LAT, N_SAMPLE, STEPS_S, LAT2, STEPS_2 = 32, 2, 2, 16, 1, 2, 24, 2
else:
    C0, TXT_LAYERS, B, LAT, N_SAMPLE, STEPS_S, LAT2, STEPS_2 = 192, 12, 8, 64, 4, 20, 96, 10
CTX, SEQ, TRAIN_STEPS, T_TRAIN, GUIDE = 768, 77, 3, 1000, 7.5


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


def timestep_embedding(t, dim):
    freqs = torch.exp(-math.log(10000.0) * torch.arange(dim // 2, device=t.device) / (dim // 2))
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, cout)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.t(F.silu(temb))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class Attention(nn.Module):
    def __init__(self, dim, ctx_dim=None):
        super().__init__()
        self.heads = max(1, dim // 64)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(ctx_dim or dim, dim, bias=False)
        self.v = nn.Linear(ctx_dim or dim, dim, bias=False)
        self.o = nn.Linear(dim, dim)

    def forward(self, x, ctx=None):
        ctx = x if ctx is None else ctx
        b, n, d = x.shape
        q, k, v = (
            t.view(b, -1, self.heads, d // self.heads).transpose(1, 2)
            for t in (self.q(x), self.k(ctx), self.v(ctx))
        )
        out = F.scaled_dot_product_attention(q, k, v)
        return self.o(out.transpose(1, 2).reshape(b, n, d))


class SpatialTransformer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.GroupNorm(32, c)
        self.proj_in = nn.Linear(c, c)
        self.ln1, self.attn1 = nn.LayerNorm(c), Attention(c)
        self.ln2, self.attn2 = nn.LayerNorm(c), Attention(c, CTX)
        self.ln3, self.ff_in, self.ff_out = nn.LayerNorm(c), nn.Linear(c, 8 * c), nn.Linear(4 * c, c)
        self.proj_out = nn.Linear(c, c)

    def forward(self, x, ctx):
        b, c, h, w = x.shape
        y = self.proj_in(self.norm(x).flatten(2).transpose(1, 2))
        y = y + self.attn1(self.ln1(y))
        y = y + self.attn2(self.ln2(y), ctx)
        a, gate = self.ff_in(self.ln3(y)).chunk(2, dim=-1)
        y = y + self.ff_out(a * F.gelu(gate))
        return x + self.proj_out(y).transpose(1, 2).reshape(b, c, h, w)


class Encoder(nn.Module):
    """conv_in, time embedding, down blocks and mid block: the half of the UNet a ControlNet copies."""

    def __init__(self):
        super().__init__()
        chans = (C0, 2 * C0, 4 * C0)
        self.conv_in = nn.Conv2d(4, C0, 3, padding=1)
        self.time = nn.Sequential(nn.Linear(C0, 4 * C0), nn.SiLU(), nn.Linear(4 * C0, 4 * C0))
        self.blocks = nn.ModuleList()
        self.skip_channels = [C0]
        cin = C0
        for lvl, c in enumerate(chans):
            for _ in range(2):
                self.blocks.append(nn.ModuleList([ResBlock(cin, c, 4 * C0), SpatialTransformer(c)]))
                self.skip_channels.append(c)
                cin = c
            if lvl < len(chans) - 1:
                self.blocks.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                self.skip_channels.append(c)
        self.mid = nn.ModuleList(
            [ResBlock(cin, cin, 4 * C0), SpatialTransformer(cin), ResBlock(cin, cin, 4 * C0)]
        )

    def forward(self, x, t, ctx, hint=None):
        temb = self.time(timestep_embedding(t, C0).to(x.dtype))
        h = self.conv_in(x)
        if hint is not None:
            h = h + hint
        skips = [h]
        for blk in self.blocks:
            if isinstance(blk, nn.Conv2d):
                h = blk(h)
            else:
                h = blk[1](blk[0](h, temb), ctx)
            skips.append(h)
        h = self.mid[2](self.mid[1](self.mid[0](h, temb), ctx), temb)
        return skips, h, temb


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = Encoder()
        chans = (C0, 2 * C0, 4 * C0)
        skips = list(self.enc.skip_channels)
        self.up = nn.ModuleList()
        cin = 4 * C0
        for lvl, c in reversed(list(enumerate(chans))):
            for _ in range(3):
                self.up.append(nn.ModuleList([ResBlock(cin + skips.pop(), c, 4 * C0), SpatialTransformer(c)]))
                cin = c
            if lvl > 0:
                self.up.append(nn.Conv2d(c, c, 3, padding=1))
        self.out = nn.Sequential(nn.GroupNorm(32, C0), nn.SiLU(), nn.Conv2d(C0, 4, 3, padding=1))

    def forward(self, x, t, ctx, down_res=None, mid_res=None):
        skips, h, temb = self.enc(x, t, ctx)
        if down_res is not None:
            skips = [s + r for s, r in zip(skips, down_res, strict=False)]
            h = h + mid_res
        for blk in self.up:
            if isinstance(blk, nn.Conv2d):
                h = blk(F.interpolate(h, scale_factor=2.0, mode="nearest"))
            else:
                h = blk[1](blk[0](torch.cat([h, skips.pop()], dim=1), temb), ctx)
        return self.out(h)


def zero_conv(c):
    conv = nn.Conv2d(c, c, 1)
    nn.init.zeros_(conv.weight)
    nn.init.zeros_(conv.bias)
    return conv


class ControlNet(nn.Module):
    def __init__(self, unet):
        super().__init__()
        self.enc = copy.deepcopy(unet.enc)
        layers, cin = [], 3
        for cout, stride in ((16, 1), (16, 1), (32, 2), (32, 1), (96, 2), (96, 1), (256, 2)):
            layers += [nn.Conv2d(cin, cout, 3, stride=stride, padding=1), nn.SiLU()]
            cin = cout
        self.hint = nn.Sequential(*layers, nn.Conv2d(256, C0, 3, padding=1))
        nn.init.zeros_(self.hint[-1].weight)
        nn.init.zeros_(self.hint[-1].bias)
        self.zero_convs = nn.ModuleList(zero_conv(c) for c in self.enc.skip_channels)
        self.mid_out = zero_conv(4 * C0)

    def forward(self, x, t, ctx, cond, scale=1.0):
        skips, h, _ = self.enc(x, t, ctx, hint=self.hint(cond))
        down = [zc(s) * scale for zc, s in zip(self.zero_convs, skips, strict=False)]
        return down, self.mid_out(h) * scale


unet = UNet().to(device)
controlnet = ControlNet(unet).to(device)
unet.to(half).requires_grad_(False).eval()
text_cfg = CLIPTextConfig(
    vocab_size=49408,
    hidden_size=CTX,
    intermediate_size=4 * CTX,
    num_hidden_layers=TXT_LAYERS,
    num_attention_heads=12,
    max_position_embeddings=SEQ,
)
text = CLIPTextModel(text_cfg).to(device, half).requires_grad_(False).eval()
ema = copy.deepcopy(controlnet).requires_grad_(False)
opt = torch.optim.AdamW(controlnet.parameters(), lr=1e-5, weight_decay=1e-2, foreach=True)
scaler = torch.amp.GradScaler(device, init_scale=256.0, enabled=amp)

betas = torch.linspace(0.00085**0.5, 0.012**0.5, T_TRAIN, device=device) ** 2
alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
gen = torch.Generator(device=device).manual_seed(3401)
null_ids = torch.full((1, SEQ), 49407, device=device)
null_ids[0, 0] = 49406
with torch.no_grad():
    null_ctx = text(input_ids=null_ids).last_hidden_state
print(
    "unet",
    sum(p.numel() for p in unet.parameters()),
    "controlnet",
    sum(p.numel() for p in controlnet.parameters()),
)
report("models optimizer ema")


def batch(n, lat):
    latents = torch.randn(n, 4, lat, lat, device=device, generator=gen) * 0.18215
    hint = torch.rand(n, 3, 8 * lat, 8 * lat, device=device, generator=gen)
    ids = torch.randint(0, 49406, (n, SEQ), device=device, generator=gen)
    return latents, hint, ids


def add_noise(x0, t, noise):
    a = alphas_cumprod[t].view(-1, 1, 1, 1)
    return a.sqrt() * x0 + (1 - a).sqrt() * noise


controlnet.train()
for step in range(TRAIN_STEPS):
    latents, hint, ids = batch(B, LAT)
    with torch.no_grad():
        ctx = text(input_ids=ids).last_hidden_state
    drop = torch.rand(B, device=device, generator=gen) < 0.1
    ctx = torch.where(drop[:, None, None], null_ctx.expand(B, -1, -1), ctx)
    noise = torch.randn(latents.shape, device=device, generator=gen)
    t = torch.randint(0, T_TRAIN, (B,), device=device, generator=gen)
    noisy = add_noise(latents, t, noise)
    with torch.autocast(device, dtype=torch.float16, enabled=amp):
        down, mid = controlnet(noisy, t, ctx, hint)
        pred = unet(noisy.to(half), t, ctx, [d.to(half) for d in down], mid.to(half))
    loss = F.mse_loss(pred.float(), noise)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(controlnet.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for pe, p in zip(ema.parameters(), controlnet.parameters(), strict=False):
            pe.lerp_(p, 1 - 0.999)
    print(f"step {step} loss {loss.item():.4f}")
del down, mid, pred, loss, noisy, ctx
report("controlnet fp16 autocast gradscaler training with ema")

with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=amp):
    latents, hint, ids = batch(B, LAT)
    ctx = text(input_ids=ids).last_hidden_state
    total = 0.0
    for tv in (100, 400, 700, 999):
        t = torch.full((B,), tv, device=device)
        noise = torch.randn(latents.shape, device=device, generator=gen)
        noisy = add_noise(latents, t, noise)
        down, mid = ema(noisy, t, ctx, hint)
        pred = unet(noisy.to(half), t, ctx, down, mid)
        total += F.mse_loss(pred.float(), noise).item()
print(f"ema validation loss {total / 4:.4f}")
del down, mid, pred, ctx
report("ema validation loss at fixed timesteps")

ema_half = copy.deepcopy(ema).to(half)


def ddim_sample(nets, scales, n, lat, steps):
    ts = torch.linspace(T_TRAIN - 1, 0, steps, device=device).long()
    latents, hint, ids = batch(n, lat)
    x = torch.randn(latents.shape, device=device, generator=gen, dtype=half)
    ctx = torch.cat([null_ctx.expand(n, -1, -1), text(input_ids=ids).last_hidden_state])
    hint2 = torch.cat([hint, hint]).to(half)
    for i, tv in enumerate(ts.tolist()):
        xin = torch.cat([x, x])
        t = torch.full((2 * n,), tv, device=device)
        down, mid = None, None
        for net, s in zip(nets, scales, strict=False):
            d, m = net(xin, t, ctx, hint2, scale=s)
            down = d if down is None else [a + b for a, b in zip(down, d, strict=False)]
            mid = m if mid is None else mid + m
        eps_u, eps_c = unet(xin, t, ctx, down, mid).chunk(2)
        eps = eps_u + GUIDE * (eps_c - eps_u)
        a = alphas_cumprod[tv]
        a_prev = alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.ones((), device=device)
        x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
        x = (a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps).to(half)
    return x


with torch.inference_mode():
    out = ddim_sample([ema_half], [1.0], N_SAMPLE, LAT, STEPS_S)
print("samples", tuple(out.shape), float(out.float().std()))
del out
report("ddim classifier-free guidance sampling ema controlnet fp16")

controlnet.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=amp):
    out = ddim_sample([ema_half, controlnet], [1.0, 0.5], 2, LAT2, STEPS_2)
print("multi-controlnet samples", tuple(out.shape))
report("multi controlnet 768 sampling")
