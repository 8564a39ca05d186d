"""A KL-regularised VAE (Stable Diffusion's autoencoder shape, smaller) written by hand, then a latent
flow-matching DiT trained on its latents: the two stages of a latent diffusion pipeline in one program.

VAE: encoder conv_in 3 -> 128, four levels of channels 128/256/512/512 with one ResnetBlock each
(GroupNorm(32) + SiLU + 3x3 conv, twice, with a 1x1 shortcut when the width changes) and a stride-2 3x3
downsample (padding (0, 1, 0, 1) by F.pad) after the first three (256 px -> 32 px), a mid block (ResnetBlock,
single-head spatial self-attention through F.scaled_dot_product_attention over the 1,024 positions,
ResnetBlock), GroupNorm/SiLU/conv_out to 2 x 4 channels (mean, log-variance) and a 1x1 quant_conv. The
decoder mirrors it (post_quant_conv, conv_in 4 -> 512, mid block, levels 512/512/256/128 with two
ResnetBlocks each and nearest x2 upsampling + 3x3 conv between levels, conv_out to 3). Loss: L1
reconstruction plus 1e-6 x KL of the diagonal Gaussian, the posterior sampled with the
reparameterisation trick. Model and images channels_last, bf16 autocast, Adam (lr 4.5e-6, betas
(0.5, 0.9)), batch 8 at 256 x 256.

Then latents of 64 images encoded under no_grad in chunks of 16 (posterior mean x 0.18215), and a
DiT-S/2 (width 384, 12 blocks, 6 heads, adaLN-Zero, unconditional) trained on them with rectified flow
(uniform t, velocity target) at batch 64 under bf16 autocast, AdamW with foreach=False (the per-parameter
for-loop implementation). Finally, under inference_mode: 4 Euler steps of the DiT on 8 latents and a VAE
decode to images (bf16 autocast).

Phases: the first VAE step; 2 more VAE steps; encoding the latents; 3 DiT steps; Euler sampling and
decode. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2005)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    RES, B_VAE, VAE_STEPS, N_LAT, CHUNK, B_DIT, DIT_STEPS, N_SAMPLE, EULER = 64, 2, 1, 8, 4, 4, 1, 2, 2
    CH = (32, 32, 64, 64)
    DIT = dict(dim=64, depth=2, heads=4)
else:
    RES, B_VAE, VAE_STEPS, N_LAT, CHUNK, B_DIT, DIT_STEPS, N_SAMPLE, EULER = 256, 8, 2, 64, 16, 64, 3, 8, 4
    CH = (128, 256, 512, 512)
    DIT = dict(dim=384, depth=12, heads=6)
Z = 4
SCALE = 0.18215


def report(tag):
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated() / 2**30, torch.cuda.memory_reserved() / 2**30
        print(f"[{tag}] max allocated {peak:.2f} GiB, reserved {reserved:.2f} GiB")
        torch.cuda.reset_peak_memory_stats()


def Norm(c):
    return nn.GroupNorm(32, c, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = Norm(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = Norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        if self.nin_shortcut is not None:
            x = self.nin_shortcut(x)
        return x + h


class AttnBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = Norm(c)
        self.q = nn.Conv2d(c, c, 1)
        self.k = nn.Conv2d(c, c, 1)
        self.v = nn.Conv2d(c, c, 1)
        self.proj_out = nn.Conv2d(c, c, 1)

    def forward(self, x):
        h = self.norm(x)
        b, c, hh, ww = h.shape
        q, k, v = (m(h).flatten(2).transpose(1, 2).unsqueeze(1) for m in (self.q, self.k, self.v))
        o = F.scaled_dot_product_attention(q, k, v).squeeze(1).transpose(1, 2).reshape(b, c, hh, ww)
        return x + self.proj_out(o)


class Downsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(3, CH[0], 3, padding=1)
        layers, cin = [], CH[0]
        for i, c in enumerate(CH):
            layers.append(ResnetBlock(cin, c))
            if i < len(CH) - 1:
                layers.append(Downsample(c))
            cin = c
        self.down = nn.Sequential(*layers)
        self.mid = nn.Sequential(ResnetBlock(cin, cin), AttnBlock(cin), ResnetBlock(cin, cin))
        self.norm_out = Norm(cin)
        self.conv_out = nn.Conv2d(cin, 2 * Z, 3, padding=1)

    def forward(self, x):
        h = self.mid(self.down(self.conv_in(x)))
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        rev = CH[::-1]
        self.conv_in = nn.Conv2d(Z, rev[0], 3, padding=1)
        self.mid = nn.Sequential(ResnetBlock(rev[0], rev[0]), AttnBlock(rev[0]), ResnetBlock(rev[0], rev[0]))
        layers, cin = [], rev[0]
        for i, c in enumerate(rev):
            layers += [ResnetBlock(cin, c), ResnetBlock(c, c)]
            if i < len(rev) - 1:
                layers.append(Upsample(c))
            cin = c
        self.up = nn.Sequential(*layers)
        self.norm_out = Norm(cin)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z):
        h = self.up(self.mid(self.conv_in(z)))
        return self.conv_out(F.silu(self.norm_out(h)))


class AutoencoderKL(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.quant_conv = nn.Conv2d(2 * Z, 2 * Z, 1)
        self.post_quant_conv = nn.Conv2d(Z, Z, 1)

    def encode(self, x):
        moments = self.quant_conv(self.encoder(x))
        mean, logvar = moments.chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def decode(self, z):
        return self.decoder(self.post_quant_conv(z))

    def forward(self, x):
        mean, logvar = self.encode(x)
        std = torch.exp(0.5 * logvar)
        z = mean + std * torch.randn_like(mean)
        kl = 0.5 * torch.sum(mean.float().pow(2) + logvar.float().exp() - 1.0 - logvar.float(), dim=[1, 2, 3])
        return self.decode(z), kl.mean()


vae = AutoencoderKL().to(device, memory_format=torch.channels_last)
vae_opt = torch.optim.Adam(vae.parameters(), lr=4.5e-6, betas=(0.5, 0.9))
print(f"VAE {sum(p.numel() for p in vae.parameters()) / 1e6:.1f} M parameters")


def images(n):
    return (torch.rand(n, 3, RES, RES, device=device) * 2 - 1).contiguous(memory_format=torch.channels_last)


def vae_step():
    vae.train()
    x = images(B_VAE)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        rec, kl = vae(x)
        rec_loss = (x - rec.float()).abs().mean()
        loss = rec_loss + 1e-6 * kl
    vae_opt.zero_grad(set_to_none=True)
    loss.backward()
    vae_opt.step()
    return rec_loss.item(), kl.item()


l1, kl = vae_step()
print(f"vae step 0: l1 {l1:.4f} kl {kl:.1f}")
report("vae first step")
for _ in range(VAE_STEPS):
    l1, kl = vae_step()
print(f"vae step {VAE_STEPS}: l1 {l1:.4f} kl {kl:.1f}")
report("vae train")

vae.eval()
chunks = []
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(N_LAT // CHUNK):
        mean, _ = vae.encode(images(CHUNK))
        chunks.append(mean.float() * SCALE)
latents = torch.cat(chunks).contiguous()
del chunks, mean
print(f"latents {tuple(latents.shape)} std {latents.std().item():.4f}")
report("encode")


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim)
        )
        self.ada = nn.Linear(dim, 6 * dim)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, x, c):
        s1, c1, g1, s2, c2, g2 = self.ada(F.silu(c)).chunk(6, dim=1)
        h = modulate(self.norm1(x), s1, c1)
        b, n, d = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + g1.unsqueeze(1) * self.proj(a)
        return x + g2.unsqueeze(1) * self.mlp(modulate(self.norm2(x), s2, c2))


class LatentDiT(nn.Module):
    def __init__(self, dim, depth, heads, lat=RES // 8, patch=2):
        super().__init__()
        self.lat, self.patch = lat, patch
        self.embed = nn.Linear(Z * patch * patch, dim)
        self.pos = nn.Parameter(torch.randn(1, (lat // patch) ** 2, dim) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.out = nn.Linear(dim, Z * patch * patch)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def forward(self, x, t):
        b, p, g = x.shape[0], self.patch, self.lat // self.patch
        x = x.reshape(b, Z, g, p, g, p).permute(0, 2, 4, 1, 3, 5).reshape(b, g * g, Z * p * p)
        x = self.embed(x) + self.pos
        half = 128
        freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / half)
        temb = torch.cat([torch.cos(t[:, None] * 1000 * freqs), torch.sin(t[:, None] * 1000 * freqs)], -1)
        c = self.t_mlp(temb)
        for blk in self.blocks:
            x = blk(x, c)
        x = self.out(self.norm(x))
        return x.reshape(b, g, g, Z, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, Z, self.lat, self.lat)


dit = LatentDiT(**DIT).to(device)
dit_opt = torch.optim.AdamW(dit.parameters(), lr=3e-4, weight_decay=0.0, foreach=False)
print(f"DiT-S/2 {sum(p.numel() for p in dit.parameters()) / 1e6:.1f} M parameters")
dit.train()
for s in range(DIT_STEPS):
    idx = torch.randint(0, latents.shape[0], (B_DIT,), device=device)
    x0 = latents[idx]
    noise = torch.randn_like(x0)
    t = torch.rand(B_DIT, device=device)
    xt = (1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * noise
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        v = dit(xt, t)
    loss = F.mse_loss(v.float(), noise - x0)
    dit_opt.zero_grad()
    loss.backward()
    dit_opt.step()
    print(f"dit step {s} loss {loss.item():.4f}")
report("dit train")

dit.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    z = torch.randn(N_SAMPLE, Z, RES // 8, RES // 8, device=device)
    ts = torch.linspace(1, 0, EULER + 1, device=device)
    for i in range(EULER):
        v = dit(z, ts[i].expand(N_SAMPLE)).float()
        z = z + (ts[i + 1] - ts[i]) * v
    out = vae.decode((z / SCALE).contiguous(memory_format=torch.channels_last))
    pix = ((out.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).cpu()
print(f"decoded {tuple(pix.shape)} mean {pix.float().mean():.1f}")
if device == "cuda":
    print(f"[sample] max allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
