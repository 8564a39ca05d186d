"""AnimateDiff-style text-to-video training written by hand: a Stable-Diffusion-like 2-D latent UNet
(channels 128 / 256 / 512, two ResBlocks a level with GroupNorm(32) + SiLU + 3x3 Conv2d and the timestep
embedding, spatial transformers at the two lower levels: self-attention and cross-attention to the text
through F.scaled_dot_product_attention with 64-dim heads, a GEGLU feed-forward) runs on the frames of a
clip folded into the batch ((b f) c h w), and after every ResBlock a motion module is inserted: a
temporal transformer of two self-attention layers over the frames of each pixel ((b h w) f c, sinusoidal
frame positions added, SDPA, zero-initialised output projection, residual). The spatial UNet is frozen
(requires_grad False) and only the motion modules train, as AnimateDiff does on a pretrained SD.

Text: a frozen transformers CLIPTextModel from a CLIPTextConfig at SD 1.5's size (12 layers of 768,
77 tokens, random ids) in fp16 under no_grad; empty-prompt embeddings for classifier-free guidance.
Latents 4 x 16 frames x 32 x 32 (256-pixel clips) at batch 4; scaled-linear beta schedule (1,000 steps),
v-prediction (v = sqrt(abar) eps - sqrt(1 - abar) x0), offset noise 0.1 per channel and clip.

Phases: the first step under bf16 autocast with foreach AdamW on the motion modules only (lr 1e-4,
clipping at 1.0); 3 more steps; DDIM sampling, 25 steps, guidance 7.5 (conditional and unconditional
batches concatenated) under torch.no_grad and bf16 autocast for 2 prompts; then the frozen spatial
weights cast to bfloat16, torch.utils.checkpoint (use_reentrant=False) around every motion module and
2 steps on 24-frame clips with a new fused AdamW. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import CLIPTextConfig, CLIPTextModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21104)
if SMALL:
    B, FR, HW, CH, DDIM, SAMPLE_B, LONG_FR, TXT_LAYERS = 1, 4, 16, (64, 64, 128), 2, 1, 6, 2
else:
    B, FR, HW, CH, DDIM, SAMPLE_B, LONG_FR, TXT_LAYERS = 4, 16, 32, (128, 256, 512), 25, 2, 24, 12
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
EMB = 4 * CH[0]


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def sinusoid(pos, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=pos.device) / half)
    args = pos[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(EMB, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


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


class GEGLU(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, 8 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        a, g = self.proj(x).chunk(2, dim=-1)
        return self.out(a * F.gelu(g))


class SpatialTransformer(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = nn.GroupNorm(32, ch)
        self.proj_in = nn.Linear(ch, ch)
        self.n1, self.n2, self.n3 = nn.LayerNorm(ch), nn.LayerNorm(ch), nn.LayerNorm(ch)
        self.attn1, self.attn2, self.ff = Attention(ch), Attention(ch, 768), GEGLU(ch)
        self.proj_out = nn.Linear(ch, ch)

    def forward(self, x, ctx):
        bf, c, h, w = x.shape
        t = self.proj_in(self.norm(x).flatten(2).transpose(1, 2))
        t = t + self.attn1(self.n1(t))
        t = t + self.attn2(self.n2(t), ctx)
        t = t + self.ff(self.n3(t))
        return x + self.proj_out(t).transpose(1, 2).reshape(bf, c, h, w)


class MotionModule(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = nn.GroupNorm(32, ch)
        self.proj_in = nn.Linear(ch, ch)
        self.layers = nn.ModuleList(nn.ModuleList([nn.LayerNorm(ch), Attention(ch)]) for _ in range(2))
        self.ff_norm, self.ff = nn.LayerNorm(ch), GEGLU(ch)
        self.proj_out = nn.Linear(ch, ch)
        nn.init.zeros_(self.proj_out.weight)
        nn.init.zeros_(self.proj_out.bias)
        self.ckpt = False

    def _forward(self, x, frames):
        bf, c, h, w = x.shape
        b = bf // frames
        t = self.norm(x).view(b, frames, c, h * w).permute(0, 3, 1, 2).reshape(b * h * w, frames, c)
        t = self.proj_in(t) + sinusoid(torch.arange(frames, device=x.device), c).to(t.dtype)
        for norm, attn in self.layers:
            t = t + attn(norm(t))
        t = t + self.ff(self.ff_norm(t))
        t = self.proj_out(t).view(b, h * w, frames, c).permute(0, 2, 3, 1).reshape(bf, c, h, w)
        return x + t

    def forward(self, x, frames):
        if self.ckpt and torch.is_grad_enabled():
            return checkpoint(self._forward, x, frames, use_reentrant=False)
        return self._forward(x, frames)


class Level(nn.Module):
    def __init__(self, cin, cout, attn, n=2):
        super().__init__()
        self.res = nn.ModuleList(ResBlock(cin if i == 0 else cout, cout) for i in range(n))
        self.attn = nn.ModuleList(SpatialTransformer(cout) for _ in range(n)) if attn else None
        self.motion = nn.ModuleList(MotionModule(cout) for _ in range(n))

    def forward(self, x, emb, ctx, frames, skips=None):
        for i, res in enumerate(self.res):
            if skips is not None:
                x = torch.cat([x, skips.pop()], dim=1)
            x = res(x, emb)
            if self.attn is not None:
                x = self.attn[i](x, ctx)
            x = self.motion[i](x, frames)
        return x


class VideoUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.t_mlp = nn.Sequential(nn.Linear(CH[0], EMB), nn.SiLU(), nn.Linear(EMB, EMB))
        self.conv_in = nn.Conv2d(4, CH[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        cin = CH[0]
        for i, c in enumerate(CH):
            self.down.append(Level(cin, c, attn=i > 0))
            self.downsample.append(
                nn.Conv2d(c, c, 3, stride=2, padding=1) if i < len(CH) - 1 else nn.Identity()
            )
            cin = c
        self.mid = Level(CH[-1], CH[-1], attn=True, n=1)
        self.up = nn.ModuleList()
        self.upconv = nn.ModuleList()
        for i, c in reversed(list(enumerate(CH))):
            self.up.append(Level(cin + c, c, attn=i > 0, n=1))
            self.upconv.append(nn.Conv2d(c, c, 3, padding=1) if i > 0 else nn.Identity())
            cin = c
        self.norm_out = nn.GroupNorm(32, CH[0])
        self.conv_out = nn.Conv2d(CH[0], 4, 3, padding=1)

    def forward(self, x, t, ctx):
        b, c, f, h, w = x.shape
        x = x.transpose(1, 2).reshape(b * f, c, h, w)
        emb = self.t_mlp(sinusoid(t, CH[0])).repeat_interleave(f, dim=0)
        ctx = ctx.repeat_interleave(f, dim=0)
        h_ = self.conv_in(x)
        skips = []
        for level, ds in zip(self.down, self.downsample):
            h_ = level(h_, emb, ctx, f)
            skips.append(h_)
            h_ = ds(h_)
        h_ = self.mid(h_, emb, ctx, f)
        for level, uc in zip(self.up, self.upconv):
            h_ = level(h_, emb, ctx, f, skips)
            if not isinstance(uc, nn.Identity):
                h_ = uc(F.interpolate(h_, scale_factor=2.0, mode="nearest"))
        out = self.conv_out(F.silu(self.norm_out(h_)))
        return out.view(b, f, 4, h, w).transpose(1, 2)


text_cfg = CLIPTextConfig(
    vocab_size=49408,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=TXT_LAYERS,
    num_attention_heads=12,
    max_position_embeddings=77,
)
text_encoder = CLIPTextModel(text_cfg).to(device, torch.float16 if amp else torch.float32).eval()
text_encoder.requires_grad_(False)
unet = VideoUNet().to(device)
unet.requires_grad_(False)
motion_params = [p for n, p in unet.named_parameters() if ".motion." in n]
for p in motion_params:
    p.requires_grad_(True)
print(
    f"unet params {sum(p.numel() for p in unet.parameters())} motion {sum(p.numel() for p in motion_params)}"
)
opt = torch.optim.AdamW(motion_params, lr=1e-4, weight_decay=1e-2, foreach=True)

betas = torch.linspace(0.00085**0.5, 0.012**0.5, 1000, dtype=torch.float64) ** 2
abar = torch.cumprod(1.0 - betas, dim=0).float().to(device)


def encode(n, empty=False):
    ids = (
        torch.zeros(n, 77, dtype=torch.long, device=device)
        if empty
        else torch.randint(0, 49408, (n, 77), device=device)
    )
    with torch.no_grad():
        return text_encoder(input_ids=ids).last_hidden_state


def train_step(frames):
    x0 = torch.randn(B, 4, frames, HW, HW, device=device)
    ctx = encode(B)
    noise = torch.randn_like(x0) + 0.1 * torch.randn(B, 4, 1, 1, 1, device=device)
    t = torch.randint(0, 1000, (B,), device=device)
    a = abar[t].view(-1, 1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    target = a.sqrt() * noise - (1 - a).sqrt() * x0
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = unet(xt, t, ctx)
    loss = F.mse_loss(pred.float(), target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(motion_params, 1.0)
    opt.step()
    return loss.item()


unet.train()
print(f"step 0 loss {train_step(FR):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(FR)
print(f"step 3 loss {loss:.4f}")
report("train motion modules")

unet.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    ctx = torch.cat([encode(SAMPLE_B), encode(SAMPLE_B, empty=True)])
    x = torch.randn(SAMPLE_B, 4, FR, HW, HW, device=device)
    ts = torch.linspace(999, 0, DDIM, device=device).long()
    for i, t in enumerate(ts):
        a = abar[t]
        a_prev = abar[ts[i + 1]] if i + 1 < len(ts) else torch.ones((), device=device)
        v_c, v_u = unet(torch.cat([x, x]), t.expand(2 * SAMPLE_B), ctx).float().chunk(2)
        v = v_u + 7.5 * (v_c - v_u)
        x0 = a.sqrt() * x - (1 - a).sqrt() * v
        eps = (1 - a).sqrt() * x + a.sqrt() * v
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    print(f"sample mean {x.mean().item():.4f}")
report("ddim cfg sampling")

spatial_dtype = torch.bfloat16 if amp else torch.float32
for n, p in unet.named_parameters():
    if ".motion." not in n:
        p.data = p.data.to(spatial_dtype)
for m in unet.modules():
    if isinstance(m, MotionModule):
        m.ckpt = True
unet.train()
opt = torch.optim.AdamW(motion_params, lr=1e-4, weight_decay=1e-2, fused=amp)
for _ in range(2):
    loss = train_step(LONG_FR)
print(f"24-frame checkpointed loss {loss:.4f}")
report("bf16 spatial checkpointed temporal")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
