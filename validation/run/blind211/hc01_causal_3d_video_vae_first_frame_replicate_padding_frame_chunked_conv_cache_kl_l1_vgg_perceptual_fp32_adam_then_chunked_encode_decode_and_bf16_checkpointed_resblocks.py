"""A causal 3-D video VAE written by hand in the style of CogVideoX's / MAGVIT-v2's: every 3-D convolution
is a CausalConv3d (kernel 3 x 3 x 3, no temporal padding inside the conv; the clip is padded in front by
replicating its first frame twice, so frame t never sees frames after t), ResBlocks of GroupNorm(32) +
SiLU + CausalConv3d, spatial downsampling by a stride-2 Conv2d applied frame by frame after F.pad(0, 1,
0, 1), temporal downsampling that keeps the first frame and average-pools the rest in pairs
(avg_pool1d over time), so a clip of 1 + 4k frames at 8x spatial compression gives 1 + k latent frames of
16 channels (mean and log-variance). The decoder mirrors it with nearest F.interpolate upsampling
(the first frame kept alone in time). Channels 64 / 128 / 256 / 256.

Loss: L1 reconstruction + KL (weight 1e-6) + a perceptual term on 4 frames a clip picked by index_select
through a frozen torchvision vgg16's first 16 feature layers (random weights, requires_grad False).

Long clips are encoded and decoded frame-chunked: every CausalConv3d keeps the last two frames of its
input as a cache (clone) and prepends them to the next chunk instead of the replicated first frame, the
first chunk is 1 + 8 frames and the rest 8 frames, so memory is bounded by the chunk, not the clip.

Phases: the first step in fp32 with Adam (batch 2 x 17 frames at 128 x 128); 3 more fp32 steps; a
65-frame 256 x 256 clip encoded and decoded in chunks under torch.no_grad with the cache (sampling the
posterior), PSNR; then 2 steps under bf16 autocast with torch.utils.checkpoint (use_reentrant=False)
around every encoder and decoder ResBlock at batch 4. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21101)
if SMALL:
    B, FR, RES, LONG_FR, LONG_RES, CHUNK, B2 = 1, 5, 32, 9, 32, 4, 1
else:
    B, FR, RES, LONG_FR, LONG_RES, CHUNK, B2 = 2, 17, 128, 65, 256, 8, 4
CH = (64, 128, 256, 256)
Z = 16
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class CausalConv3d(nn.Module):
    def __init__(self, cin, cout, k=3):
        super().__init__()
        self.kt = k
        self.conv = nn.Conv3d(cin, cout, k, padding=(0, k // 2, k // 2))
        self.use_cache = False
        self.cache = None

    def forward(self, x):
        if self.use_cache and self.cache is not None:
            x = torch.cat([self.cache, x], dim=2)
        else:
            x = torch.cat([x[:, :, :1].expand(-1, -1, self.kt - 1, -1, -1), x], dim=2)
        if self.use_cache:
            self.cache = x[:, :, -(self.kt - 1) :].clone()
        return self.conv(x)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin)
        self.conv1 = CausalConv3d(cin, cout)
        self.norm2 = nn.GroupNorm(32, cout)
        self.conv2 = CausalConv3d(cout, cout)
        self.skip = nn.Conv3d(cin, cout, 1) if cin != cout else nn.Identity()
        self.ckpt = False

    def _forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h

    def forward(self, x):
        if self.ckpt and self.training and torch.is_grad_enabled():
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


def per_frame(fn, x):
    b, c, t, h, w = x.shape
    y = fn(x.transpose(1, 2).reshape(b * t, c, h, w))
    return y.reshape(b, t, *y.shape[1:]).transpose(1, 2)


class Down(nn.Module):
    def __init__(self, ch, time):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, stride=2)
        self.time = time
        self.first_chunk = True

    def forward(self, x):
        if self.time:
            b, c, t, h, w = x.shape
            keep = 1 if (self.first_chunk and t % 2 == 1) else 0
            rest = x[:, :, keep:].permute(0, 3, 4, 1, 2).reshape(-1, c, t - keep)
            rest = F.avg_pool1d(rest, 2, 2).reshape(b, h, w, c, -1).permute(0, 3, 4, 1, 2)
            x = torch.cat([x[:, :, :keep], rest], dim=2) if keep else rest
        return per_frame(lambda f: self.conv(F.pad(f, (0, 1, 0, 1))), x)


class Up(nn.Module):
    def __init__(self, ch, time):
        super().__init__()
        self.conv = nn.Conv2d(ch, ch, 3, padding=1)
        self.time = time
        self.first_chunk = True

    def forward(self, x):
        if self.time:
            if self.first_chunk:
                first, rest = x[:, :, :1], x[:, :, 1:]
                rest = F.interpolate(rest, scale_factor=(2, 1, 1), mode="nearest")
                x = torch.cat([first, rest], dim=2)
            else:
                x = F.interpolate(x, scale_factor=(2, 1, 1), mode="nearest")
        return per_frame(lambda f: self.conv(F.interpolate(f, scale_factor=2.0, mode="nearest")), x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = CausalConv3d(3, CH[0])
        layers = []
        for i in range(len(CH) - 1):
            layers += [ResBlock(CH[i], CH[i + 1]), Down(CH[i + 1], time=i < 2)]
        self.layers = nn.ModuleList(layers)
        self.mid = ResBlock(CH[-1], CH[-1])
        self.norm = nn.GroupNorm(32, CH[-1])
        self.conv_out = CausalConv3d(CH[-1], 2 * Z)

    def forward(self, x):
        h = self.conv_in(x)
        for layer in self.layers:
            h = layer(h)
        h = self.mid(h)
        return self.conv_out(F.silu(self.norm(h)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        rch = CH[::-1]
        self.conv_in = CausalConv3d(Z, rch[0])
        self.mid = ResBlock(rch[0], rch[0])
        layers = []
        for i in range(len(rch) - 1):
            layers += [ResBlock(rch[i], rch[i + 1]), Up(rch[i + 1], time=i >= 1)]
        self.layers = nn.ModuleList(layers)
        self.norm = nn.GroupNorm(32, rch[-1])
        self.conv_out = CausalConv3d(rch[-1], 3)

    def forward(self, z):
        h = self.mid(self.conv_in(z))
        for layer in self.layers:
            h = layer(h)
        return self.conv_out(F.silu(self.norm(h)))


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()

    def set_chunked(self, on, first=True):
        for m in self.modules():
            if isinstance(m, CausalConv3d):
                m.use_cache = on
                if first:
                    m.cache = None
            if isinstance(m, (Down, Up)):
                m.first_chunk = first

    def forward(self, x):
        mean, logvar = self.encoder(x).chunk(2, dim=1)
        logvar = logvar.clamp(-30.0, 20.0)
        z = mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)
        return self.decoder(z), mean, logvar


vae = VAE().to(device)
vgg = torchvision.models.vgg16().features[:16].to(device).eval()
for p in vgg.parameters():
    p.requires_grad_(False)
opt = torch.optim.Adam(vae.parameters(), lr=1e-4, betas=(0.5, 0.9))
print(f"params {sum(p.numel() for p in vae.parameters())}")


def train_step(batch, autocast=False):
    x = torch.rand(batch, 3, FR, RES, RES, device=device) * 2 - 1
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
        rec, mean, logvar = vae(x)
        l1 = (rec.float() - x).abs().mean()
        kl = 0.5 * (mean.float().pow(2) + logvar.float().exp() - 1.0 - logvar.float()).mean()
        idx = torch.randperm(FR, device=device)[:4]
        fr = x.index_select(2, idx).transpose(1, 2).flatten(0, 1)
        fr_rec = rec.index_select(2, idx).transpose(1, 2).flatten(0, 1)
        perc = F.mse_loss(vgg(fr_rec.float()), vgg(fr))
        loss = l1 + 1e-6 * kl + 0.1 * perc
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


vae.train()
print(f"step 0 loss {train_step(B):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(B)
print(f"step 3 loss {loss:.4f}")
report("train fp32")

vae.eval()
with torch.no_grad():
    clip = torch.rand(1, 3, LONG_FR, LONG_RES, LONG_RES, device=device) * 2 - 1
    chunks = [clip[:, :, : CHUNK + 1]] + list(clip[:, :, CHUNK + 1 :].split(CHUNK, dim=2))
    latents = []
    for i, c in enumerate(chunks):
        vae.set_chunked(True, first=i == 0)
        mean, logvar = vae.encoder(c).chunk(2, dim=1)
        latents.append(mean + torch.exp(0.5 * logvar.clamp(-30.0, 20.0)) * torch.randn_like(mean))
    z = torch.cat(latents, dim=2)
    print(
        f"latent {tuple(z.shape)} after encode allocated {torch.cuda.memory_allocated() if device == 'cuda' else 0}"
    )
    frames = []
    zchunks = [z[:, :, : CHUNK // 4 + 1]] + list(z[:, :, CHUNK // 4 + 1 :].split(CHUNK // 4, dim=2))
    for i, c in enumerate(zchunks):
        vae.set_chunked(True, first=i == 0)
        frames.append(vae.decoder(c).clamp(-1, 1))
    vae.set_chunked(False)
    rec = torch.cat(frames, dim=2)
    mse = (rec - clip).pow(2).mean()
    print(f"decoded {tuple(rec.shape)} psnr {(10 * torch.log10(4.0 / mse)).item():.2f}")
    del clip, rec, frames, latents, z
report("chunked encode/decode")

vae.train()
for m in vae.modules():
    if isinstance(m, ResBlock):
        m.ckpt = True
for _ in range(2):
    loss = train_step(B2, autocast=True)
print(f"bf16 checkpointed loss {loss:.4f}")
report("bf16 checkpointed")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
