"""Video diffusion by hand: a factorised space-time UNet (per-frame 2-D ResBlocks with GroupNorm and
SiLU, temporal self-attention across the 8 frames at every level and spatial self-attention at the
lowest, both through F.scaled_dot_product_attention; channels 96/192/384; a sinusoidal timestep
embedding) trained as a DDPM noise predictor under bf16 autocast with AdamW and an EMA copy of the
weights updated by torch._foreach_lerp_, batches of 4 clips of 8 frames at 64x64, 3 steps; then 12
DDIM steps with the EMA model under torch.inference_mode for 4 clips; 5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9504)
B, T, S, C, SAMPLE_STEPS = (2, 4, 16, 16, 3) if SMALL else (4, 8, 64, 96, 12)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(temb, cout)
        self.n2, self.c2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):  # x: (B*T, C, H, W), emb: (B*T, temb)
        h = self.c1(F.silu(self.n1(x)))
        h = h + self.t(F.silu(emb))[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return h + self.skip(x)


class Attention(nn.Module):
    def __init__(self, ch, temporal, heads=4):
        super().__init__()
        self.temporal, self.heads = temporal, heads
        self.norm = nn.GroupNorm(8, ch)
        self.qkv, self.out = nn.Linear(ch, 3 * ch), nn.Linear(ch, ch)

    def forward(self, x):
        bt, c, h, w = x.shape
        y = self.norm(x).permute(0, 2, 3, 1)  # (B*T, H, W, C)
        if self.temporal:  # sequences over frames, one per pixel
            y = y.reshape(bt // T, T, h * w, c).transpose(1, 2).reshape(-1, T, c)
        else:  # sequences over pixels, one per frame
            y = y.reshape(bt, h * w, c)
        q, k, v = self.qkv(y).unflatten(-1, (3, self.heads, c // self.heads)).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        y = self.out(y)
        if self.temporal:
            y = y.reshape(bt // T, h * w, T, c).transpose(1, 2)
        y = y.reshape(bt, h, w, c).permute(0, 3, 1, 2)
        return x + y


class SpaceTimeUNet(nn.Module):
    def __init__(self, ch):
        super().__init__()
        chs, temb = (ch, 2 * ch, 4 * ch), 4 * ch
        self.ch = ch
        self.temb = nn.Sequential(nn.Linear(ch, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.down, self.dattn, self.pool = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        cin = ch
        for i, c in enumerate(chs):
            self.down.append(ResBlock(cin, c, temb))
            self.dattn.append(Attention(c, temporal=True))
            self.pool.append(nn.Conv2d(c, c, 3, stride=2, padding=1) if i < 2 else nn.Identity())
            cin = c
        self.mid = ResBlock(cin, cin, temb)
        self.mid_space, self.mid_time = Attention(cin, temporal=False), Attention(cin, temporal=True)
        self.up, self.uattn = nn.ModuleList(), nn.ModuleList()
        for c in reversed(chs):
            self.up.append(ResBlock(cin + c, c, temb))
            self.uattn.append(Attention(c, temporal=True))
            cin = c
        self.outp = nn.Sequential(nn.GroupNorm(8, ch), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))

    def forward(self, x, t):  # x: (B, T, 3, H, W), t: (B,)
        b = x.shape[0]
        half = self.ch // 2
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=x.device) / half)
        emb = self.temb(torch.cat([torch.sin(t[:, None] * freqs), torch.cos(t[:, None] * freqs)], -1))
        emb = emb.repeat_interleave(T, dim=0)
        h = self.inp(x.flatten(0, 1))
        skips = []
        for block, attn, pool in zip(self.down, self.dattn, self.pool, strict=True):
            h = attn(block(h, emb))
            skips.append(h)
            h = pool(h)
        h = self.mid_time(self.mid_space(self.mid(h, emb)))
        for block, attn in zip(self.up, self.uattn, strict=True):
            s = skips.pop()
            if h.shape[-1] != s.shape[-1]:
                h = F.interpolate(h, size=s.shape[-2:], mode="nearest")
            h = attn(block(torch.cat([h, s], 1), emb))
        return self.outp(h).unflatten(0, (b, T))


model = SpaceTimeUNet(C).to(device)
ema = copy.deepcopy(model).requires_grad_(False)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
betas = torch.linspace(1e-4, 0.02, 1000, device=device)
alphas_bar = torch.cumprod(1 - betas, 0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x0 = torch.rand(B, T, 3, S, S, device=device) * 2 - 1
    t = torch.randint(0, 1000, (B,), device=device)
    noise = torch.randn_like(x0)
    a = alphas_bar[t].view(B, 1, 1, 1, 1)
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.mse_loss(model(xt, t.float()).float(), noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.001)
    del x0, t, noise, a, xt, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
timesteps = torch.linspace(999, 0, SAMPLE_STEPS, device=device).long()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(B, T, 3, S, S, device=device)
    for i, t in enumerate(timesteps):
        a = alphas_bar[t]
        a_prev = alphas_bar[timesteps[i + 1]] if i + 1 < len(timesteps) else torch.ones((), device=device)
        eps = ema(x, t.float().expand(B)).float()
        x0 = (x - (1 - a).sqrt() * eps) / a.sqrt()
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
if device == "cuda":
    print(
        f"sample {tuple(x.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
