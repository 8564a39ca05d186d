"""Image-to-video diffusion in the style of Stable Video Diffusion, written by hand, under
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set at the top. The UNet (channels 192 / 384 / 576,
latents 4 x 14 frames x 40 x 64: 320 x 512 clips through an 8x VAE) mixes a spatial path and a temporal
path in every block with SVD's learned AlphaBlender (sigmoid(mix) x spatial + (1 - sigmoid) x temporal):
spatial ResBlocks are GroupNorm(32) + SiLU + 3x3 Conv2d on the frames folded into the batch, temporal
ResBlocks are Conv1d(k = 3) over the frames of each pixel ((b h w) c f); at the two lower levels a spatial
transformer (self-attention and cross-attention to the conditioning image's CLIP embedding by SDPA, GEGLU)
is blended with a temporal transformer (nn.MultiheadAttention over frames, batch_first, need_weights
False, sinusoidal frame positions). Conditioning: the first frame's latent, noise-augmented, is
concatenated to every noisy frame (8 input channels); a frozen transformers CLIPVisionModelWithProjection
from a CLIPVisionConfig at ViT-L/14's size (24 layers of 1024, 224 px) in fp16 gives the image embedding;
fps, motion bucket and augmentation level are micro-conditions (sinusoidal, added to the time embedding).

EDM (Karras et al.) preconditioning: c_skip, c_out, c_in, c_noise = ln(sigma) / 4, log-normal sigmas
(P_mean 0.7, P_std 1.6), loss weight (sigma^2 + 0.25) / (0.5 sigma)^2.

Phases: the first step under fp16 autocast with GradScaler (init scale 2^8) and fused AdamW (batch 2); 3
more steps; EDM Heun sampling (12 steps, 23 evaluations, Karras sigmas from 700 to 0.002) of 25 frames under
torch.inference_mode and fp16 autocast, guidance rising linearly from 1 to 3 across frames (conditional
and unconditional batches concatenated, the unconditional with zeroed image latent and embedding); then
torch.cuda.empty_cache() and 2 optimizer steps under bf16 autocast without a scaler, each of 2 accumulated
micro-batches of one 25-frame clip. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21105)
if SMALL:
    B, FR, LH, LW, CH, HEUN, LONG_FR, VIS_LAYERS = 1, 3, 8, 16, (64, 64, 128), 2, 5, 2
else:
    B, FR, LH, LW, CH, HEUN, LONG_FR, VIS_LAYERS = 2, 14, 40, 64, (192, 384, 576), 12, 25, 24
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
EMB = 4 * CH[0]
SD = 0.5


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def sinusoid(pos, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=pos.device) / half)
    args = pos[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class AlphaBlender(nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = nn.Parameter(torch.tensor(0.5))

    def forward(self, spatial, temporal):
        a = torch.sigmoid(self.mix)
        return a * spatial + (1.0 - a) * temporal


class ResBlock2D(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(EMB, cout)
        self.norm2, self.conv2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x))) + self.emb(F.silu(emb))[:, :, None, None]
        return self.skip(x) + self.conv2(F.silu(self.norm2(h)))


class TemporalResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, ch), nn.Conv1d(ch, ch, 3, padding=1)
        self.emb = nn.Linear(EMB, ch)
        self.norm2, self.conv2 = nn.GroupNorm(32, ch), nn.Conv1d(ch, ch, 3, padding=1)

    def forward(self, x, emb, frames):
        bf, c, h, w = x.shape
        b = bf // frames
        t = x.view(b, frames, c, h, w).permute(0, 3, 4, 2, 1).reshape(b * h * w, c, frames)
        e = self.emb(F.silu(emb)).view(b, frames, c).transpose(1, 2).repeat_interleave(h * w, dim=0)
        y = self.conv1(F.silu(self.norm1(t))) + e
        y = t + self.conv2(F.silu(self.norm2(y)))
        return y.view(b, h, w, c, frames).permute(0, 4, 3, 1, 2).reshape(bf, c, h, w)


class STResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.spatial = ResBlock2D(cin, cout)
        self.temporal = TemporalResBlock(cout)
        self.blend = AlphaBlender()

    def forward(self, x, emb, frames):
        s = self.spatial(x, emb)
        return self.blend(s, self.temporal(s, emb, frames))


class Attention(nn.Module):
    def __init__(self, dim, ctx_dim=None):
        super().__init__()
        self.heads = dim // 64
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(ctx_dim or dim, 2 * dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, ctx=None):
        ctx = x if ctx is None else ctx
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.heads, 64).transpose(1, 2)
        k, v = self.kv(ctx).view(b, ctx.shape[1], 2, self.heads, 64).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d))


class FeedForward(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 8 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        a, g = self.proj(x).chunk(2, dim=-1)
        return self.out(a * F.gelu(g))


class STTransformer(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = nn.GroupNorm(32, ch)
        self.proj_in = nn.Linear(ch, ch)
        self.n1, self.n2, self.n3 = nn.LayerNorm(ch), nn.LayerNorm(ch), nn.LayerNorm(ch)
        self.attn1, self.attn2, self.ff = Attention(ch), Attention(ch, 768), FeedForward(ch)
        self.tn1, self.tn2 = nn.LayerNorm(ch), nn.LayerNorm(ch)
        self.tattn = nn.MultiheadAttention(ch, ch // 64, batch_first=True)
        self.tff = FeedForward(ch)
        self.blend = AlphaBlender()
        self.proj_out = nn.Linear(ch, ch)

    def forward(self, x, ctx, frames):
        bf, c, h, w = x.shape
        b = bf // frames
        s = self.proj_in(self.norm(x).flatten(2).transpose(1, 2))
        s = s + self.attn1(self.n1(s))
        s = s + self.attn2(self.n2(s), ctx)
        s = s + self.ff(self.n3(s))
        t = s.view(b, frames, h * w, c).transpose(1, 2).reshape(b * h * w, frames, c)
        t = t + sinusoid(torch.arange(frames, device=x.device), c).to(t.dtype)
        tn = self.tn1(t)
        t = t + self.tattn(tn, tn, tn, need_weights=False)[0]
        t = t + self.tff(self.tn2(t))
        t = t.view(b, h * w, frames, c).transpose(1, 2).reshape(bf, h * w, c)
        out = self.proj_out(self.blend(s, t))
        return x + out.transpose(1, 2).reshape(bf, c, h, w)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.t_mlp = nn.Sequential(nn.Linear(CH[0], EMB), nn.SiLU(), nn.Linear(EMB, EMB))
        self.add_mlp = nn.Sequential(nn.Linear(3 * 256, EMB), nn.SiLU(), nn.Linear(EMB, EMB))
        self.conv_in = nn.Conv2d(8, CH[0], 3, padding=1)
        self.down, self.down_attn, self.downsample = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        cin = CH[0]
        for i, c in enumerate(CH):
            self.down.append(STResBlock(cin, c))
            self.down_attn.append(STTransformer(c) if i > 0 else nn.Identity())
            self.downsample.append(
                nn.Conv2d(c, c, 3, stride=2, padding=1) if i < len(CH) - 1 else nn.Identity()
            )
            cin = c
        self.mid = STResBlock(CH[-1], CH[-1])
        self.mid_attn = STTransformer(CH[-1])
        self.up, self.up_attn, self.upconv = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for i, c in reversed(list(enumerate(CH))):
            self.up.append(STResBlock(cin + c, c))
            self.up_attn.append(STTransformer(c) if i > 0 else nn.Identity())
            self.upconv.append(nn.Conv2d(c, c, 3, padding=1) if i > 0 else nn.Identity())
            cin = c
        self.norm_out = nn.GroupNorm(32, CH[0])
        self.conv_out = nn.Conv2d(CH[0], 4, 3, padding=1)

    def forward(self, x, c_noise, ctx, added):
        b, c, f, h, w = x.shape
        x = x.transpose(1, 2).reshape(b * f, c, h, w)
        emb = self.t_mlp(sinusoid(c_noise, CH[0])) + self.add_mlp(added)
        emb = emb.repeat_interleave(f, dim=0)
        ctx = ctx.repeat_interleave(f, dim=0)
        hs, skips = self.conv_in(x), []
        for res, attn, ds in zip(self.down, self.down_attn, self.downsample):
            hs = res(hs, emb, f)
            if not isinstance(attn, nn.Identity):
                hs = attn(hs, ctx, f)
            skips.append(hs)
            hs = ds(hs)
        hs = self.mid_attn(self.mid(hs, emb, f), ctx, f)
        for res, attn, uc in zip(self.up, self.up_attn, self.upconv):
            hs = res(torch.cat([hs, skips.pop()], dim=1), emb, f)
            if not isinstance(attn, nn.Identity):
                hs = attn(hs, ctx, f)
            if not isinstance(uc, nn.Identity):
                hs = uc(F.interpolate(hs, scale_factor=2.0, mode="nearest"))
        out = self.conv_out(F.silu(self.norm_out(hs)))
        return out.view(b, f, 4, h, w).transpose(1, 2)


def precond_denoise(net, x, sigma, cond_lat, ctx, added):
    s = sigma.view(-1, 1, 1, 1, 1)
    c_skip = SD**2 / (s**2 + SD**2)
    c_out = s * SD / (s**2 + SD**2).sqrt()
    c_in = 1 / (s**2 + SD**2).sqrt()
    c_noise = sigma.log() / 4
    inp = torch.cat([c_in * x, cond_lat.expand(-1, -1, x.shape[2], -1, -1)], dim=1)
    return c_skip * x + c_out * net(inp, c_noise, ctx, added).float()


vis_cfg = CLIPVisionConfig(
    hidden_size=1024,
    intermediate_size=4096,
    num_hidden_layers=VIS_LAYERS,
    num_attention_heads=16,
    image_size=224,
    patch_size=14,
    projection_dim=768,
)
image_encoder = CLIPVisionModelWithProjection(vis_cfg).to(device, torch.float16 if amp else torch.float32)
image_encoder.eval().requires_grad_(False)
unet = UNet().to(device)
print(f"unet params {sum(p.numel() for p in unet.parameters())}")
opt = torch.optim.AdamW(unet.parameters(), lr=3e-5, weight_decay=0.0, fused=amp)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**8, enabled=amp)


def conditions(n, frames):
    with torch.no_grad():
        img = torch.randn(n, 3, 224, 224, device=device, dtype=image_encoder.dtype)
        ctx = image_encoder(pixel_values=img).image_embeds.float()[:, None]
    first = torch.randn(n, 4, 1, LH, LW, device=device)
    aug = torch.full((n,), 0.02, device=device)
    cond_lat = first + aug.view(-1, 1, 1, 1, 1) * torch.randn_like(first)
    fps = torch.full((n,), 6.0, device=device)
    motion = torch.full((n,), 127.0, device=device)
    added = torch.cat([sinusoid(fps, 256), sinusoid(motion, 256), sinusoid(aug * 1000, 256)], dim=-1)
    return cond_lat, ctx, added, first


def loss_fn(n, frames, dtype):
    cond_lat, ctx, added, first = conditions(n, frames)
    x0 = torch.cat([first, torch.randn(n, 4, frames - 1, LH, LW, device=device)], dim=2)
    sigma = (torch.randn(n, device=device) * 1.6 + 0.7).exp()
    noisy = x0 + sigma.view(-1, 1, 1, 1, 1) * torch.randn_like(x0)
    with torch.autocast("cuda", dtype=dtype, enabled=amp):
        den = precond_denoise(unet, noisy, sigma, cond_lat, ctx, added)
    weight = (sigma**2 + SD**2) / (sigma * SD) ** 2
    return (weight.view(-1, 1, 1, 1, 1) * (den - x0) ** 2).mean()


def train_step_fp16():
    loss = loss_fn(B, FR, torch.float16)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    return loss.item()


unet.train()
print(f"step 0 loss {train_step_fp16():.4f}")
report("first step")
for _ in range(3):
    loss = train_step_fp16()
print(f"step 3 loss {loss:.4f} scale {scaler.get_scale()}")
report("train fp16")

unet.eval()
with torch.inference_mode():
    cond_lat, ctx, added, _ = conditions(1, LONG_FR)
    cond_all = torch.cat([cond_lat, torch.zeros_like(cond_lat)])
    ctx_all = torch.cat([ctx, torch.zeros_like(ctx)])
    added_all = torch.cat([added, added])
    guidance = torch.linspace(1.0, 3.0, LONG_FR, device=device).view(1, 1, -1, 1, 1)
    ramp = torch.linspace(0, 1, HEUN, device=device)
    sigmas = (700 ** (1 / 7) + ramp * (0.002 ** (1 / 7) - 700 ** (1 / 7))) ** 7
    sigmas = torch.cat([sigmas, torch.zeros(1, device=device)])

    def denoise(x, s):
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            d_c, d_u = precond_denoise(
                unet, torch.cat([x, x]), s.expand(2), cond_all, ctx_all, added_all
            ).chunk(2)
        return d_u + guidance * (d_c - d_u)

    x = torch.randn(1, 4, LONG_FR, LH, LW, device=device) * sigmas[0]
    for i in range(HEUN):
        s, s_next = sigmas[i], sigmas[i + 1]
        d = (x - denoise(x, s)) / s
        x_next = x + (s_next - s) * d
        if i < HEUN - 1:
            d2 = (x_next - denoise(x_next, s_next)) / s_next
            x_next = x + (s_next - s) * 0.5 * (d + d2)
        x = x_next
    print(f"sample std {x.std().item():.4f}")
report("heun cfg sampling 25 frames")

torch.cuda.empty_cache()
unet.train()
for _ in range(2):
    opt.zero_grad(set_to_none=True)
    for _ in range(2):
        loss = loss_fn(1, LONG_FR, torch.bfloat16) / 2
        loss.backward()
    torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
    opt.step()
print(f"bf16 accumulated loss {loss.item():.4f}")
report("bf16 accumulation 25 frames")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
