"""A DDPM on 32 x 32 RGB images, hand-written after Ho et al. 2020's UNet: channels 96 x (1, 2, 2),
two residual blocks per level (GroupNorm 32, SiLU, dropout 0.1, a sinusoidal time embedding
through a 384-wide MLP added per block), self-attention at 16 x 16 and in the middle through
F.scaled_dot_product_attention with 4 heads, strided-conv downsampling and nearest upsampling;
cosine noise schedule of 1,000 steps, epsilon prediction, batch 128 under bf16 autocast, AdamW
with an EMA copy updated by torch._foreach_lerp_, 3 steps; then 100-step ancestral sampling
(strided timesteps) of 64 images with the EMA model under inference_mode and bf16 autocast,
predicting x0 with Imagen-style dynamic thresholding (torch.quantile of |x0| per image at 0.995);
5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11306)
C, B, STEPS, NSAMP, SSTEPS, RES = (32, 4, 2, 2, 4, 16) if SMALL else (96, 128, 3, 64, 100, 32)
T = 1000
device = "cuda" if torch.cuda.is_available() else "cpu"


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], -1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, temb):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.drop = nn.Dropout(0.1)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(F.silu(emb))[:, :, None, None]
        h = self.conv2(self.drop(F.silu(self.norm2(h))))
        return h + self.skip(x)


class Attention(nn.Module):
    def __init__(self, ch, heads=4):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(32, ch)
        self.qkv = nn.Conv2d(ch, 3 * ch, 1)
        self.proj = nn.Conv2d(ch, ch, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = (
            self.qkv(self.norm(x))
            .reshape(b, 3, self.heads, c // self.heads, h * w)
            .transpose(-1, -2)
            .unbind(1)
        )
        out = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(out.transpose(-1, -2).reshape(b, c, h, w))


class UNet(nn.Module):
    def __init__(self, mults=(1, 2, 2), attn_res=(16,)):
        super().__init__()
        temb = 4 * C
        self.temb = nn.Sequential(nn.Linear(C, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(3, C, 3, padding=1)
        self.down = nn.ModuleList()
        chans, ch, res = [C], C, RES
        for i, m in enumerate(mults):
            for _ in range(2):
                self.down.append(nn.ModuleList([ResBlock(ch, C * m, temb)]))
                ch = C * m
                if res in attn_res:
                    self.down[-1].append(Attention(ch))
                chans.append(ch)
            if i < len(mults) - 1:
                self.down.append(nn.ModuleList([nn.Conv2d(ch, ch, 3, stride=2, padding=1)]))
                chans.append(ch)
                res //= 2
        self.mid = nn.ModuleList([ResBlock(ch, ch, temb), Attention(ch), ResBlock(ch, ch, temb)])
        self.up = nn.ModuleList()
        for i, m in reversed(list(enumerate(mults))):
            for _ in range(3):
                blk = nn.ModuleList([ResBlock(ch + chans.pop(), C * m, temb)])
                ch = C * m
                if res in attn_res:
                    blk.append(Attention(ch))
                self.up.append(blk)
            if i > 0:
                self.up.append(
                    nn.ModuleList(
                        [nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(ch, ch, 3, padding=1)]
                    )
                )
                res *= 2
        self.out = nn.Sequential(nn.GroupNorm(32, ch), nn.SiLU(), nn.Conv2d(ch, 3, 3, padding=1))

    @staticmethod
    def run(mods, h, emb):
        for m in mods:
            h = m(h, emb) if isinstance(m, ResBlock) else m(h)
        return h

    def forward(self, x, t):
        emb = self.temb(timestep_embedding(t, C))
        hs = [self.inp(x)]
        for mods in self.down:
            hs.append(self.run(mods, hs[-1], emb))
        h = self.run(self.mid, hs[-1], emb)
        for mods in self.up:
            if isinstance(mods[0], ResBlock):
                h = torch.cat([h, hs.pop()], 1)
            h = self.run(mods, h, emb)
        return self.out(h)


s = 0.008
f = torch.cos((torch.arange(T + 1, device=device) / T + s) / (1 + s) * math.pi / 2) ** 2
alpha_bar = (f[1:] / f[0]).clamp(1e-5, 1.0)
model = UNet().to(device)
ema = copy.deepcopy(model).requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0)
params, ema_params = list(model.parameters()), list(ema.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    x0 = torch.rand(B, 3, RES, RES, device=device) * 2 - 1
    t = torch.randint(0, T, (B,), device=device)
    noise = torch.randn_like(x0)
    ab = alpha_bar[t].view(-1, 1, 1, 1)
    xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.mse_loss(model(xt, t).float(), noise)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, params, 1 - 0.999)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x0, t, noise, ab, xt, loss
ema.eval()
ts = torch.linspace(T - 1, 0, SSTEPS, device=device).long()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(NSAMP, 3, RES, RES, device=device)
    for i in range(SSTEPS):
        t = ts[i].expand(NSAMP)
        ab = alpha_bar[ts[i]]
        ab_prev = alpha_bar[ts[i + 1]] if i + 1 < SSTEPS else torch.ones((), device=device)
        eps = ema(x, t).float()
        x0 = (x - (1 - ab).sqrt() * eps) / ab.sqrt()
        q = torch.quantile(x0.abs().flatten(1), 0.995, dim=1).clamp(min=1.0).view(-1, 1, 1, 1)
        x0 = x0.clamp(-q, q) / q
        beta = 1 - ab / ab_prev
        mean = ab_prev.sqrt() * beta / (1 - ab) * x0 + (1 - beta).sqrt() * (1 - ab_prev) / (1 - ab) * x
        var = beta * (1 - ab_prev) / (1 - ab)
        x = mean + var.sqrt() * torch.randn_like(x) if i + 1 < SSTEPS else mean
if device == "cuda":
    print(
        f"sample {tuple(x.shape)} std {x.std().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
