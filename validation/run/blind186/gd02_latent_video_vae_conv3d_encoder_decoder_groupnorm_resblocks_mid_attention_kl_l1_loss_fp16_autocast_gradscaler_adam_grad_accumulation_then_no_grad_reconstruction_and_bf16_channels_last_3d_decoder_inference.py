"""A latent video VAE written by hand, after the 3-D causal-free VAEs of Open-Sora / CogVideoX at a small
width: the encoder is Conv3d(3 -> 64, k 3) then three levels of two ResBlocks (GroupNorm(32) + SiLU +
Conv3d k 3, twice, with a 1x1x1 shortcut when widths differ; widths 64, 128, 256) separated by
downsampling Conv3d with stride (2, 2, 2), (2, 2, 2) and then (1, 2, 2) (asymmetric zero padding as the
LDM VAE does, F.pad then a padding-0 conv), a middle ResBlock + single-head spatio-temporal self-attention
over all F * H * W latent positions (F.scaled_dot_product_attention) + ResBlock, GroupNorm + SiLU and a
Conv3d to 2 x 4 channels (mean and log-variance, clamped to [-30, 20]); 16 x 128 x 128 RGB clips become
4 x 4 x 16 x 16 latents. The decoder mirrors it with trilinear / nearest F.interpolate upsampling + conv.
Loss: L1 reconstruction + 0.1 * MSE + 1e-6 * KL to the unit Gaussian.

Training: fp16 autocast with torch.amp.GradScaler, Adam (lr 1e-4, betas (0.5, 0.9)), batch 8 as two
micro-batches of 4 with gradient accumulation (loss / 2), clip_grad_norm_ after unscale_. Phases: the
first optimizer step; 3 more; reconstruction of 4 validation clips of 4 under no_grad (fp16 autocast,
posterior mean), PSNR on the device; then the decoder alone cast to bfloat16 and channels_last_3d,
decoding 2 batches of 8 random latents under torch.inference_mode, results moved to the host as uint8.
4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18602)
if SMALL:
    MICRO, ACCUM, FR, RES, STEPS, VAL_N, VAL_B, DEC_B = 1, 2, 8, 32, 1, 1, 1, 2
else:
    MICRO, ACCUM, FR, RES, STEPS, VAL_N, VAL_B, DEC_B = 4, 2, 16, 128, 3, 4, 4, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
WIDTHS = (64, 128, 256)
Z = 4


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = nn.GroupNorm(32, cin, eps=1e-6)
        self.conv1 = nn.Conv3d(cin, cout, 3, padding=1)
        self.norm2 = nn.GroupNorm(32, cout, eps=1e-6)
        self.conv2 = nn.Conv3d(cout, cout, 3, padding=1)
        self.short = nn.Conv3d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return self.short(x) + h


class AttnBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.GroupNorm(32, c, eps=1e-6)
        self.qkv = nn.Conv3d(c, 3 * c, 1)
        self.proj = nn.Conv3d(c, c, 1)

    def forward(self, x):
        b, c, f, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, 1, c, f * h * w).transpose(-1, -2).unbind(1)
        o = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj(o.transpose(-1, -2).reshape(b, c, f, h, w))


class Downsample(nn.Module):
    def __init__(self, c, temporal):
        super().__init__()
        self.temporal = temporal
        self.conv = nn.Conv3d(c, c, 3, stride=(2 if temporal else 1, 2, 2), padding=0)

    def forward(self, x):
        pad = (0, 1, 0, 1, 0, 1) if self.temporal else (0, 1, 0, 1, 1, 1)
        return self.conv(F.pad(x, pad))


class Upsample(nn.Module):
    def __init__(self, c, temporal):
        super().__init__()
        self.temporal = temporal
        self.conv = nn.Conv3d(c, c, 3, padding=1)

    def forward(self, x):
        if self.temporal:
            x = F.interpolate(x, scale_factor=2.0, mode="trilinear", align_corners=False)
        else:
            x = F.interpolate(x, scale_factor=(1.0, 2.0, 2.0), mode="nearest")
        return self.conv(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv3d(3, WIDTHS[0], 3, padding=1)
        layers = []
        cur = WIDTHS[0]
        for i, w in enumerate(WIDTHS):
            layers += [ResBlock(cur, w), ResBlock(w, w)]
            cur = w
            layers.append(Downsample(cur, temporal=i < 2))
        self.down = nn.Sequential(*layers)
        self.mid = nn.Sequential(ResBlock(cur, cur), AttnBlock(cur), ResBlock(cur, cur))
        self.norm_out = nn.GroupNorm(32, cur, eps=1e-6)
        self.conv_out = nn.Conv3d(cur, 2 * Z, 3, padding=1)

    def forward(self, x):
        h = self.mid(self.down(self.conv_in(x)))
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        cur = WIDTHS[-1]
        self.conv_in = nn.Conv3d(Z, cur, 3, padding=1)
        self.mid = nn.Sequential(ResBlock(cur, cur), AttnBlock(cur), ResBlock(cur, cur))
        layers = []
        for i, w in reversed(list(enumerate(WIDTHS))):
            layers += [ResBlock(cur, w), ResBlock(w, w), ResBlock(w, w)]
            cur = w
            layers.append(Upsample(cur, temporal=i < 2))
        self.up = nn.Sequential(*layers)
        self.norm_out = nn.GroupNorm(32, cur, eps=1e-6)
        self.conv_out = nn.Conv3d(cur, 3, 3, padding=1)

    def forward(self, z):
        h = self.up(self.mid(self.conv_in(z)))
        return self.conv_out(F.silu(self.norm_out(h)))


class VideoVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()

    def encode(self, x):
        mean, logvar = self.encoder(x).chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def forward(self, x, sample=True):
        mean, logvar = self.encode(x)
        z = mean + torch.randn_like(mean) * torch.exp(0.5 * logvar) if sample else mean
        return self.decoder(z), mean, logvar


def vae_loss(x, rec, mean, logvar):
    rec = rec.float()
    l1 = (rec - x).abs().mean()
    mse = F.mse_loss(rec, x)
    kl = (
        0.5
        * torch.sum(
            mean.float().pow(2) + logvar.float().exp() - 1.0 - logvar.float(), dim=[1, 2, 3, 4]
        ).mean()
    )
    return l1 + 0.1 * mse + 1e-6 * kl, kl


vae = VideoVAE().to(device)
print(f"params {sum(p.numel() for p in vae.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(vae.parameters(), lr=1e-4, betas=(0.5, 0.9))
scaler = torch.amp.GradScaler("cuda", enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def clips(n):
    return torch.rand(n, 3, FR, RES, RES, device=device) * 2 - 1


vae.train()
for step in range(STEPS + 1):
    for _micro in range(ACCUM):
        x = clips(MICRO)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            rec, mean, logvar = vae(x)
            loss, kl = vae_loss(x, rec, mean, logvar)
        scaler.scale(loss / ACCUM).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(
        f"step {step} loss {loss.item():.4f} kl {kl.item():.1f} grad norm {gn.item():.3f}"
        f" scale {scaler.get_scale()}"
    )
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, rec, mean, logvar, loss, kl
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

vae.eval()
psnrs = []
with torch.no_grad():
    for _ in range(VAL_N):
        x = clips(VAL_B)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            rec, _, _ = vae(x, sample=False)
        mse = ((rec.float().clamp(-1, 1) - x) ** 2).mean(dim=[1, 2, 3, 4])
        psnrs.append(10 * torch.log10(4.0 / mse))
print(f"val psnr {torch.cat(psnrs).mean().item():.2f} dB")
del x, rec, mse, psnrs
if device == "cuda":
    print(f"val peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

decoder = vae.decoder
del vae, opt, scaler
decoder = decoder.to(dtype=torch.bfloat16, memory_format=torch.channels_last_3d)
frames = []
with torch.inference_mode():
    for _ in range(2):
        z = torch.randn(DEC_B, Z, FR // 4, RES // 8, RES // 8, device=device, dtype=torch.bfloat16)
        z = z.contiguous(memory_format=torch.channels_last_3d)
        video = decoder(z)
        frames.append(((video.float().clamp(-1, 1) + 1) * 127.5).to(torch.uint8).cpu())
print(f"decoded {len(frames)} x {tuple(frames[0].shape)}")
if device == "cuda":
    print(
        f"decode allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
