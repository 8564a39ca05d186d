"""Restormer for motion deblurring, by hand (smaller: dim 32, blocks [2, 3, 3, 4], heads [1, 2, 4, 8],
refinement 2, ffn expansion 2.66). MDTA: 1x1 conv to qkv then a 3x3 depthwise conv, q and k
L2-normalised along the spatial axis, a C/heads x C/heads (transposed, channel) attention with a learned
per-head temperature, softmax, attn @ v. GDFN: 1x1 conv to 2 x hidden, 3x3 depthwise conv, chunk into
two, gelu(x1) * x2, 1x1 conv back. LayerNorm over channels by permute to (B, H*W, C), nn.LayerNorm and
back (WithBias). Down by conv + PixelUnshuffle(2), up by conv + PixelShuffle(2), skip concat and 1x1
channel reduction, global residual.

Loss: Charbonnier + 0.05 x L1 of the torch.fft.rfft2 spectra (real and imaginary parts stacked by
torch.view_as_real), in fp32. Phases: 3 fp32 steps of foreach Adam (lr 3e-4, betas (0.9, 0.999),
clip_grad_norm_ 0.01) at batch 8 on 128 x 128; no_grad fp32 eval at batch 2 on 256 x 256; 3 steps
under bf16 autocast with every transformer block under non-reentrant checkpoint at batch 8 on 192 x 192
(the FFT loss outside autocast in fp32); inference_mode bf16 at 512 x 512 batch 1. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2283)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class ChannelNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        b, c, h, w = x.shape
        y = self.ln(x.flatten(2).transpose(1, 2))
        return y.transpose(1, 2).reshape(b, c, h, w)


class MDTA(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))
        self.qkv = nn.Conv2d(dim, dim * 3, 1, bias=False)
        self.qkv_dw = nn.Conv2d(dim * 3, dim * 3, 3, 1, 1, groups=dim * 3, bias=False)
        self.proj = nn.Conv2d(dim, dim, 1, bias=False)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv_dw(self.qkv(x)).chunk(3, dim=1)
        q = q.reshape(b, self.heads, c // self.heads, h * w)
        k = k.reshape(b, self.heads, c // self.heads, h * w)
        v = v.reshape(b, self.heads, c // self.heads, h * w)
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
        attn = (q @ k.transpose(-2, -1)) * self.temperature
        attn = attn.softmax(dim=-1)
        out = (attn @ v).reshape(b, c, h, w)
        return self.proj(out)


class GDFN(nn.Module):
    def __init__(self, dim, expansion=2.66):
        super().__init__()
        hidden = int(dim * expansion)
        self.project_in = nn.Conv2d(dim, hidden * 2, 1, bias=False)
        self.dw = nn.Conv2d(hidden * 2, hidden * 2, 3, 1, 1, groups=hidden * 2, bias=False)
        self.project_out = nn.Conv2d(hidden, dim, 1, bias=False)

    def forward(self, x):
        x1, x2 = self.dw(self.project_in(x)).chunk(2, dim=1)
        return self.project_out(F.gelu(x1) * x2)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = ChannelNorm(dim)
        self.attn = MDTA(dim, heads)
        self.norm2 = ChannelNorm(dim)
        self.ffn = GDFN(dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class Stage(nn.Module):
    def __init__(self, dim, heads, n):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(n))
        self.ckpt = False

    def forward(self, x):
        for blk in self.blocks:
            if self.ckpt and self.training:
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return x


class Restormer(nn.Module):
    def __init__(self, dim=32, blocks=(2, 3, 3, 4), heads=(1, 2, 4, 8), refine=2):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, 3, 1, 1, bias=False)
        self.enc1 = Stage(dim, heads[0], blocks[0])
        self.down12 = nn.Sequential(nn.Conv2d(dim, dim // 2, 3, 1, 1, bias=False), nn.PixelUnshuffle(2))
        self.enc2 = Stage(dim * 2, heads[1], blocks[1])
        self.down23 = nn.Sequential(nn.Conv2d(dim * 2, dim, 3, 1, 1, bias=False), nn.PixelUnshuffle(2))
        self.enc3 = Stage(dim * 4, heads[2], blocks[2])
        self.down34 = nn.Sequential(nn.Conv2d(dim * 4, dim * 2, 3, 1, 1, bias=False), nn.PixelUnshuffle(2))
        self.latent = Stage(dim * 8, heads[3], blocks[3])
        self.up43 = nn.Sequential(nn.Conv2d(dim * 8, dim * 16, 3, 1, 1, bias=False), nn.PixelShuffle(2))
        self.reduce3 = nn.Conv2d(dim * 8, dim * 4, 1, bias=False)
        self.dec3 = Stage(dim * 4, heads[2], blocks[2])
        self.up32 = nn.Sequential(nn.Conv2d(dim * 4, dim * 8, 3, 1, 1, bias=False), nn.PixelShuffle(2))
        self.reduce2 = nn.Conv2d(dim * 4, dim * 2, 1, bias=False)
        self.dec2 = Stage(dim * 2, heads[1], blocks[1])
        self.up21 = nn.Sequential(nn.Conv2d(dim * 2, dim * 4, 3, 1, 1, bias=False), nn.PixelShuffle(2))
        self.dec1 = Stage(dim * 2, heads[0], blocks[0])
        self.refine = Stage(dim * 2, heads[0], refine)
        self.out = nn.Conv2d(dim * 2, 3, 3, 1, 1, bias=False)

    def stages(self):
        return [self.enc1, self.enc2, self.enc3, self.latent, self.dec3, self.dec2, self.dec1, self.refine]

    def forward(self, x):
        e1 = self.enc1(self.embed(x))
        e2 = self.enc2(self.down12(e1))
        e3 = self.enc3(self.down23(e2))
        lat = self.latent(self.down34(e3))
        d3 = self.dec3(self.reduce3(torch.cat([self.up43(lat), e3], 1)))
        d2 = self.dec2(self.reduce2(torch.cat([self.up32(d3), e2], 1)))
        d1 = self.dec1(torch.cat([self.up21(d2), e1], 1))
        return self.out(self.refine(d1)) + x


model = Restormer().to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.999), foreach=True)


def loss_fn(pred, target):
    char = torch.sqrt((pred - target) ** 2 + 1e-6).mean()
    fp = torch.view_as_real(torch.fft.rfft2(pred, norm="backward"))
    ft = torch.view_as_real(torch.fft.rfft2(target, norm="backward"))
    return char + 0.05 * F.l1_loss(fp, ft)


def train(steps, bsz, size, dtype=None):
    model.train()
    for _ in range(steps):
        sharp = torch.rand(bsz, 3, size, size, device=device)
        blurred = F.avg_pool2d(sharp, 5, 1, 2) + 0.01 * torch.randn_like(sharp)
        if dtype is None:
            pred = model(blurred)
        else:
            with torch.autocast("cuda", dtype=dtype):
                pred = model(blurred)
        loss = loss_fn(pred.float(), sharp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
        opt.step()
        print(f"loss {loss.item():.4f}")


train(3, 8, 128)
report("fp32 foreach adam")

model.eval()
with torch.no_grad():
    out = model(torch.rand(2, 3, 256, 256, device=device))
print("eval", out.shape)
del out
report("no_grad eval 256")

for st in model.stages():
    st.ckpt = True
train(3, 8, 192, torch.bfloat16)
report("bf16 checkpointed train")

opt.zero_grad(set_to_none=True)
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    out = model(torch.rand(1, 3, 512, 512, device=device))
print("inference", out.shape)
report("inference 512")
