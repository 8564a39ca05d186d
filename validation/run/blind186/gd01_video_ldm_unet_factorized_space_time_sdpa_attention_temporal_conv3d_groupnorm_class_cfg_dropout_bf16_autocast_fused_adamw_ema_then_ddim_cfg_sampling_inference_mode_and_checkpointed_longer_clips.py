"""A latent video diffusion UNet written by hand, in the style of Video LDM / ModelScope-T2V's factorized
UNet3D: every stage is a ResBlock3D (GroupNorm(32) + SiLU + a spatial Conv3d with kernel (1, 3, 3), the
timestep + class embedding added per channel, a second (1, 3, 3) conv, then a temporal Conv3d (3, 1, 1)
branch with its own GroupNorm, zero-initialised output and residual) followed, at the two lower
resolutions, by a factorized space-time transformer block: spatial self-attention over the H * W tokens
of each frame, temporal self-attention over the F frames of each pixel (a learned frame-position
embedding), both with F.scaled_dot_product_attention and 64-dim heads, then a GEGLU feed-forward.
Channels 128 / 256 / 384, downsampling by strided (1, 2, 2) Conv3d, upsampling by nearest
F.interpolate(scale (1, 2, 2)) + conv, skip connections concatenated. Latents are 4 x 16 frames x 32 x 32
(a 256 x 256 video through an 8x VAE), batch 8; 1,000-step linear-beta DDPM schedule, epsilon
prediction, sinusoidal timestep embeddings, 64 classes plus a null class for classifier-free guidance
(labels dropped to the null class with p = 0.1 on the device).

Training under bf16 autocast with fused AdamW (lr 1e-4, weight decay 0.01), gradient clipping at 1.0 and
an fp32 EMA of the weights (decay 0.999, torch._foreach_lerp_). Phases: the first step; 3 more steps;
DDIM sampling with the EMA copy (25 steps, eta 0, guidance scale 5, the conditional and unconditional
batches concatenated) under torch.inference_mode and bf16 autocast, the decoded latents moved to the
host; then 2 training steps on 32-frame clips at batch 4 with torch.utils.checkpoint around every
ResBlock3D and transformer block (use_reentrant=False). 4 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18601)
if SMALL:
    B, FR, HW, CH, STEPS, DDIM_STEPS, SAMPLE_B, LONG_FR, LONG_B = 2, 4, 8, 32, 1, 3, 2, 8, 1
else:
    B, FR, HW, CH, STEPS, DDIM_STEPS, SAMPLE_B, LONG_FR, LONG_B = 8, 16, 32, 128, 3, 25, 8, 32, 4
NUM_CLASSES = 64
T_STEPS = 1000
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock3D(nn.Module):
    def __init__(self, cin, cout, emb_dim, dropout=0.0):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv3d(cin, cout, (1, 3, 3), padding=(0, 1, 1))
        self.emb = nn.Linear(emb_dim, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.drop = nn.Dropout(dropout)
        self.conv2 = nn.Conv3d(cout, cout, (1, 3, 3), padding=(0, 1, 1))
        self.tnorm = nn.GroupNorm(32, cout)
        self.tconv = nn.Conv3d(cout, cout, (3, 1, 1), padding=(1, 0, 0))
        nn.init.zeros_(self.tconv.weight)
        nn.init.zeros_(self.tconv.bias)
        self.skip = nn.Conv3d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(F.silu(emb))[:, :, None, None, None]
        h = self.conv2(self.drop(F.silu(self.norm2(h))))
        h = self.skip(x) + h
        return h + self.tconv(F.silu(self.tnorm(h)))


class Attention(nn.Module):
    def __init__(self, dim, head_dim=64):
        super().__init__()
        self.heads = dim // head_dim
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).reshape(b, n, c))


class GEGLU(nn.Module):
    def __init__(self, dim, mult=4):
        super().__init__()
        self.proj = nn.Linear(dim, dim * mult * 2)
        self.out = nn.Linear(dim * mult, dim)

    def forward(self, x):
        a, gate = self.proj(x).chunk(2, dim=-1)
        return self.out(a * F.gelu(gate))


class SpaceTimeBlock(nn.Module):
    def __init__(self, dim, max_frames=64):
        super().__init__()
        self.norm_in = nn.GroupNorm(32, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.spatial = Attention(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.temporal = Attention(dim)
        self.frame_pos = nn.Parameter(torch.zeros(max_frames, dim))
        self.ln3 = nn.LayerNorm(dim)
        self.ff = GEGLU(dim)

    def forward(self, x):
        b, c, f, h, w = x.shape
        y = self.norm_in(x).permute(0, 2, 3, 4, 1).reshape(b * f, h * w, c)
        y = y + self.spatial(self.ln1(y))
        y = y.view(b, f, h * w, c).transpose(1, 2).reshape(b * h * w, f, c) + self.frame_pos[:f]
        y = y + self.temporal(self.ln2(y))
        y = y + self.ff(self.ln3(y))
        y = y.view(b, h, w, f, c).permute(0, 4, 3, 1, 2)
        return x + y


class VideoUNet(nn.Module):
    def __init__(self, in_ch=4, ch=128, mults=(1, 2, 3), attn_levels=(1, 2), num_classes=NUM_CLASSES):
        super().__init__()
        emb_dim = ch * 4
        self.ch = ch
        self.time_mlp = nn.Sequential(nn.Linear(ch, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.class_emb = nn.Embedding(num_classes + 1, emb_dim)
        self.conv_in = nn.Conv3d(in_ch, ch, (1, 3, 3), padding=(0, 1, 1))
        self.use_checkpoint = False
        self.down = nn.ModuleList()
        chans = [ch]
        cur = ch
        for i, m in enumerate(mults):
            out = ch * m
            blocks = nn.ModuleList([ResBlock3D(cur, out, emb_dim)])
            if i in attn_levels:
                blocks.append(SpaceTimeBlock(out))
            cur = out
            chans.append(cur)
            down = (
                nn.Conv3d(cur, cur, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
                if i < len(mults) - 1
                else None
            )
            self.down.append(
                nn.ModuleDict({"blocks": blocks, "down": down if down is not None else nn.Identity()})
            )
        self.mid1 = ResBlock3D(cur, cur, emb_dim)
        self.mid_attn = SpaceTimeBlock(cur)
        self.mid2 = ResBlock3D(cur, cur, emb_dim)
        self.up = nn.ModuleList()
        for i, m in reversed(list(enumerate(mults))):
            out = ch * m
            skip = chans.pop()
            blocks = nn.ModuleList([ResBlock3D(cur + skip, out, emb_dim)])
            if i in attn_levels:
                blocks.append(SpaceTimeBlock(out))
            cur = out
            up = nn.Conv3d(cur, cur, (1, 3, 3), padding=(0, 1, 1)) if i > 0 else nn.Identity()
            self.up.append(nn.ModuleDict({"blocks": blocks, "up": up}))
        self.norm_out = nn.GroupNorm(32, cur)
        self.conv_out = nn.Conv3d(cur, in_ch, (1, 3, 3), padding=(0, 1, 1))
        self.num_levels = len(mults)

    def run(self, block, x, emb):
        if isinstance(block, ResBlock3D):
            if self.use_checkpoint and self.training:
                return checkpoint(block, x, emb, use_reentrant=False)
            return block(x, emb)
        if self.use_checkpoint and self.training:
            return checkpoint(block, x, use_reentrant=False)
        return block(x)

    def forward(self, x, t, y):
        emb = self.time_mlp(timestep_embedding(t, self.ch)) + self.class_emb(y)
        h = self.conv_in(x)
        skips = []
        for i, level in enumerate(self.down):
            for block in level["blocks"]:
                h = self.run(block, h, emb)
            skips.append(h)
            if i < self.num_levels - 1:
                h = level["down"](h)
        h = self.run(self.mid1, h, emb)
        h = self.run(self.mid_attn, h, emb)
        h = self.run(self.mid2, h, emb)
        for j, level in enumerate(self.up):
            h = torch.cat([h, skips.pop()], dim=1)
            for block in level["blocks"]:
                h = self.run(block, h, emb)
            if j < self.num_levels - 1:
                h = F.interpolate(h, scale_factor=(1, 2, 2), mode="nearest")
                h = level["up"](h)
        return self.conv_out(F.silu(self.norm_out(h)))


betas = torch.linspace(1e-4, 0.02, T_STEPS, dtype=torch.float64)
alphas_cumprod = torch.cumprod(1 - betas, dim=0).float().to(device)

model = VideoUNet(ch=CH).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
ema = copy.deepcopy(model).requires_grad_(False)
ema_params = list(ema.parameters())
model_params = list(model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=amp)
if device == "cuda":
    print(f"model+ema {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(bsz, frames):
    x0 = torch.randn(bsz, 4, frames, HW, HW, device=device)
    labels = torch.randint(0, NUM_CLASSES, (bsz,), device=device)
    drop = torch.rand(bsz, device=device) < 0.1
    labels = torch.where(drop, torch.full_like(labels, NUM_CLASSES), labels)
    t = torch.randint(0, T_STEPS, (bsz,), device=device)
    noise = torch.randn_like(x0)
    a = alphas_cumprod[t].view(-1, 1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = model(xt, t, labels)
    loss = F.mse_loss(pred.float(), noise)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, model_params, 1 - 0.999)
    return loss.item(), gn.item()


model.train()
loss, gn = train_step(B, FR)
print(f"step 0 loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss, gn = train_step(B, FR)
    print(f"step {step} loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@torch.inference_mode()
def ddim_sample(net, labels, steps, guidance=5.0):
    n = labels.shape[0]
    x = torch.randn(n, 4, FR, HW, HW, device=device)
    null = torch.full_like(labels, NUM_CLASSES)
    ys = torch.cat([labels, null])
    timesteps = torch.linspace(T_STEPS - 1, 0, steps, device=device).long()
    for i, t in enumerate(timesteps):
        a_t = alphas_cumprod[t]
        a_prev = alphas_cumprod[timesteps[i + 1]] if i + 1 < steps else torch.tensor(1.0, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            eps = net(torch.cat([x, x]), t.expand(2 * n), ys).float()
        eps_c, eps_u = eps.chunk(2)
        eps = eps_u + guidance * (eps_c - eps_u)
        x0 = (x - (1 - a_t).sqrt() * eps) / a_t.sqrt()
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    return x


ema.eval()
labels = torch.randint(0, NUM_CLASSES, (SAMPLE_B,), device=device)
latents = ddim_sample(ema, labels, DDIM_STEPS).cpu()
print(f"sampled latents {tuple(latents.shape)} std {latents.std():.3f}")
if device == "cuda":
    print(f"sampling peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.use_checkpoint = True
for step in range(2):
    loss, gn = train_step(LONG_B, LONG_FR)
    print(f"long-clip step {step} loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(
        f"long-clip allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
