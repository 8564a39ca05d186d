"""A Real-ESRGAN-style second-order degradation pipeline done on the GPU, feeding an EDSR x4.

Degradation (per batch of 32 or 16 HR crops of 256 x 256, all on the GPU, shapes fixed): per-image
anisotropic Gaussian blur kernels 21 x 21 built from random sigmas and angles (covariance, meshgrid,
exp, normalise), applied by one conv2d with groups = B * 3 after reshaping the batch into channels
(reflect padding 10); resize by F.interpolate to 0.5 x (area); Gaussian noise (sigma 1..30/255) and a
Poisson-like shot noise approximated by a Gaussian with variance proportional to the signal; a second
blur (isotropic, 21 x 21), resize to the LR size 64 x 64 (bicubic), noise again; a 2-D sinc kernel
(jinc-free: sin(r)/r by torch.special.sinc) applied the same grouped way; clamp and round to 1/255.

EDSR (64 feats, 16 residual blocks with residual scaling 0.1, mean shift, PixelShuffle x2 twice),
loss L1 + 0.1 x L1 of torch.fft.fft2 amplitude (abs of the complex spectrum). Adam lr 1e-4 betas
(0.9, 0.99). Phases: 4 steps under fp16 autocast with a GradScaler at batch 32; inference_mode x8
geometric self-ensemble (flips and rot90 of the LR, inverted on the output, averaged) on 2 images of 160
x 160; empty_cache() then a wide EDSR (256 feats, 12 blocks, residual scaling 0.1) trained fp32 with
torch.utils.checkpoint.checkpoint_sequential over its body in 4 segments (use_reentrant False) for 3
steps of Adam at batch 8 on freshly degraded batches. 3 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint_sequential

torch.manual_seed(2285)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


K = 21


def aniso_kernels(b):
    ax = torch.arange(K, device=device, dtype=torch.float32) - K // 2
    yy, xx = torch.meshgrid(ax, ax, indexing="ij")
    grid = torch.stack([xx, yy], -1).view(1, K * K, 2)
    s1 = torch.rand(b, device=device) * 3.5 + 0.2
    s2 = torch.rand(b, device=device) * 3.5 + 0.2
    th = torch.rand(b, device=device) * math.pi
    c, s = torch.cos(th), torch.sin(th)
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    diag = torch.diag_embed(torch.stack([s1 ** 2, s2 ** 2], -1))
    cov = rot @ diag @ rot.transpose(1, 2)
    inv = torch.linalg.inv(cov)
    e = torch.einsum("bni,bij,bnj->bn", grid.expand(b, -1, -1), inv, grid.expand(b, -1, -1))
    k = torch.exp(-0.5 * e).view(b, K, K)
    return k / k.sum((1, 2), keepdim=True)


def iso_kernels(b):
    ax = torch.arange(K, device=device, dtype=torch.float32) - K // 2
    r2 = ax.view(1, -1, 1) ** 2 + ax.view(1, 1, -1) ** 2
    sig = torch.rand(b, 1, 1, device=device) * 1.3 + 0.2
    k = torch.exp(-r2 / (2 * sig ** 2))
    return k / k.sum((1, 2), keepdim=True)


def sinc_kernels(b):
    ax = torch.arange(K, device=device, dtype=torch.float32) - K // 2
    r = torch.sqrt(ax.view(1, -1, 1) ** 2 + ax.view(1, 1, -1) ** 2)
    wc = torch.rand(b, 1, 1, device=device) * (math.pi - math.pi / 3) + math.pi / 3
    k = wc / (2 * math.pi) * torch.special.sinc(wc * r / math.pi)
    return k / k.sum((1, 2), keepdim=True)


def filter2d(img, kernels):
    b, c, h, w = img.shape
    x = F.pad(img, (K // 2,) * 4, mode="reflect").reshape(1, b * c, h + K - 1, w + K - 1)
    weight = kernels.unsqueeze(1).repeat_interleave(c, 0)  # [b*c, 1, K, K]
    return F.conv2d(x, weight, groups=b * c).view(b, c, h, w)


def add_noise(img):
    b = img.shape[0]
    sigma = (torch.rand(b, 1, 1, 1, device=device) * 29 + 1) / 255
    gauss = torch.randn_like(img) * sigma
    shot = torch.randn_like(img) * torch.sqrt(img.clamp(min=0) * (torch.rand(b, 1, 1, 1, device=device) * 0.05))
    return img + gauss + shot


@torch.no_grad()
def degrade(hr, scale=4):
    b, _, h, w = hr.shape
    x = filter2d(hr, aniso_kernels(b))
    x = F.interpolate(x, scale_factor=0.5, mode="area")
    x = add_noise(x).clamp_(0, 1)
    x = filter2d(x, iso_kernels(b))
    x = F.interpolate(x, size=(h // scale, w // scale), mode="bicubic", align_corners=False)
    x = add_noise(x)
    x = filter2d(x, sinc_kernels(b))
    return (x.clamp(0, 1) * 255).round() / 255


class ResBlock(nn.Module):
    def __init__(self, n, res_scale):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(n, n, 3, 1, 1), nn.ReLU(True), nn.Conv2d(n, n, 3, 1, 1))
        self.res_scale = res_scale

    def forward(self, x):
        return x + self.body(x).mul(self.res_scale)


class EDSR(nn.Module):
    def __init__(self, n=64, blocks=16, res_scale=0.1):
        super().__init__()
        self.register_buffer("rgb_mean", torch.tensor([0.4488, 0.4371, 0.4040]).view(1, 3, 1, 1))
        self.head = nn.Conv2d(3, n, 3, 1, 1)
        self.body = nn.Sequential(*[ResBlock(n, res_scale) for _ in range(blocks)], nn.Conv2d(n, n, 3, 1, 1))
        self.tail = nn.Sequential(nn.Conv2d(n, 4 * n, 3, 1, 1), nn.PixelShuffle(2),
                                  nn.Conv2d(n, 4 * n, 3, 1, 1), nn.PixelShuffle(2), nn.Conv2d(n, 3, 3, 1, 1))
        self.segments = 0

    def forward(self, x):
        x = self.head(x - self.rgb_mean)
        if self.segments and self.training:
            res = checkpoint_sequential(self.body, self.segments, x, use_reentrant=False)
        else:
            res = self.body(x)
        return self.tail(res + x) + self.rgb_mean


def loss_fn(sr, hr):
    amp_s = torch.fft.fft2(sr.float()).abs()
    amp_h = torch.fft.fft2(hr).abs()
    return F.l1_loss(sr.float(), hr) + 0.1 * F.l1_loss(amp_s, amp_h)


model = EDSR().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.99))
scaler = torch.amp.GradScaler("cuda")
for _ in range(4):
    hr = torch.rand(32, 3, 256, 256, device=device)
    lq = degrade(hr)
    with torch.autocast("cuda", dtype=torch.float16):
        sr = model(lq)
    loss = loss_fn(sr, hr)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"loss {loss.item():.4f} scale {scaler.get_scale()}")
del hr, lq, sr, loss
report("fp16 gradscaler edsr")

model.eval()
lq = torch.rand(2, 3, 160, 160, device=device)
with torch.inference_mode():
    acc = torch.zeros(2, 3, 640, 640, device=device)
    for flip in (False, True):
        for k in range(4):
            x = torch.flip(lq, dims=[3]) if flip else lq
            y = model(torch.rot90(x, k, dims=(2, 3)))
            y = torch.rot90(y, -k, dims=(2, 3))
            acc += torch.flip(y, dims=[3]) if flip else y
    acc /= 8
print("self-ensemble", acc.shape)
del acc, y, x, lq
report("x8 self-ensemble")

del model, opt, scaler
torch.cuda.empty_cache()
wide = EDSR(256, 12, 0.1).to(device)
wide.segments = 4
opt = torch.optim.Adam(wide.parameters(), lr=1e-4, betas=(0.9, 0.99))
wide.train()
for _ in range(3):
    hr = torch.rand(16, 3, 256, 256, device=device)
    lq = degrade(hr)
    sr = wide(lq)
    loss = loss_fn(sr, hr)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"wide loss {loss.item():.4f}")
report("wide edsr checkpoint_sequential fp32")
