"""A text-conditioned diffusion UNet written by hand (ResBlocks with GroupNorm/SiLU and timestep
embeddings, self- and cross-attention to 77 text tokens at the two lowest resolutions, skip
concatenations) under a frozen HF CLIPTextModel built from its config (no_grad, fp16 weights);
DDPM noise-prediction training on 4x64x64 latents at batch 16 under bf16 autocast,
AdamW(fused=True), an EMA copy updated with torch._foreach_lerp_, 2 steps; 3 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import CLIPTextConfig, CLIPTextModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5802)
B, C, TXT, HW = (2, 32, 32, 16) if SMALL else (16, 192, 768, 64)


def temb(t, dim):
    freq = torch.exp(-math.log(10000) * torch.arange(dim // 2, device=t.device) / (dim // 2))
    a = t[:, None].float() * freq[None]
    return torch.cat([a.sin(), a.cos()], dim=-1)


class Res(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32 if cin % 32 == 0 else 8, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(4 * C, cout)
        self.n2, self.c2 = (
            nn.GroupNorm(32 if cout % 32 == 0 else 8, cout),
            nn.Conv2d(cout, cout, 3, padding=1),
        )
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, e):
        h = self.c1(F.silu(self.n1(x))) + self.t(e)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class Attn(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.norm = nn.GroupNorm(32, ch)
        self.self_attn = nn.MultiheadAttention(ch, 8, batch_first=True)
        self.cross = nn.MultiheadAttention(ch, 8, kdim=TXT, vdim=TXT, batch_first=True)

    def forward(self, x, ctx):
        b, c, h, w = x.shape
        s = self.norm(x).flatten(2).transpose(1, 2)
        s = s + self.self_attn(s, s, s, need_weights=False)[0]
        s = s + self.cross(s, ctx, ctx, need_weights=False)[0]
        return x + s.transpose(1, 2).reshape(b, c, h, w)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        chs = [C, 2 * C, 4 * C]
        self.inp = nn.Conv2d(4, C, 3, padding=1)
        self.temb = nn.Sequential(nn.Linear(C, 4 * C), nn.SiLU(), nn.Linear(4 * C, 4 * C))
        self.down = nn.ModuleList([Res(C, chs[0]), Res(chs[0], chs[1]), Res(chs[1], chs[2])])
        self.dattn = nn.ModuleList([nn.Identity(), Attn(chs[1]), Attn(chs[2])])
        self.mid, self.mattn = Res(chs[2], chs[2]), Attn(chs[2])
        self.up = nn.ModuleList([Res(2 * chs[2], chs[1]), Res(2 * chs[1], chs[0]), Res(2 * chs[0], C)])
        self.uattn = nn.ModuleList([Attn(chs[1]), nn.Identity(), nn.Identity()])
        self.out = nn.Sequential(nn.GroupNorm(32, C), nn.SiLU(), nn.Conv2d(C, 4, 3, padding=1))

    def forward(self, x, t, ctx):
        e = self.temb(temb(t, C))
        h, skips = self.inp(x), []
        for i, (res, attn) in enumerate(zip(self.down, self.dattn, strict=True)):
            h = res(h, e)
            h = attn(h, ctx) if isinstance(attn, Attn) else h
            skips.append(h)
            if i < 2:
                h = F.avg_pool2d(h, 2)
        h = self.mattn(self.mid(h, e), ctx)
        for i, (res, attn) in enumerate(zip(self.up, self.uattn, strict=True)):
            h = res(torch.cat([h, skips.pop()], dim=1), e)
            h = attn(h, ctx) if isinstance(attn, Attn) else h
            if i < 2:
                h = F.interpolate(h, scale_factor=2, mode="nearest")
        return self.out(h)


device = "cuda" if torch.cuda.is_available() else "cpu"
tconf = CLIPTextConfig(
    hidden_size=TXT,
    intermediate_size=4 * TXT,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 12,
    max_position_embeddings=77,
)
text = (
    CLIPTextModel(tconf).to(device=device, dtype=torch.float16 if device == "cuda" else torch.float32).eval()
)
text.requires_grad_(False)
unet = UNet().to(device)
ema = copy.deepcopy(unet).requires_grad_(False)
optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-4, fused=device == "cuda")
betas = torch.linspace(1e-4, 0.02, 1000, device=device)
abar = torch.cumprod(1 - betas, dim=0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    tokens = torch.randint(0, tconf.vocab_size, (B, 77), device=device)
    with torch.no_grad():
        ctx = text(input_ids=tokens).last_hidden_state
    x0 = torch.randn(B, 4, HW, HW, device=device)
    t = torch.randint(0, 1000, (B,), device=device)
    noise = torch.randn_like(x0)
    a = abar[t][:, None, None, None]
    xt = a.sqrt() * x0 + (1 - a).sqrt() * noise
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.mse_loss(unet(xt, t, ctx).float(), noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.parameters()), list(unet.parameters()), 0.001)
    del tokens, ctx, x0, t, noise, a, xt, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
