"""An image-processing pipeline and point-cloud geometry in plain tensor code: a batch of 16 RGB
1024x1024 images blurred by a separable Gaussian (two depthwise conv2d passes, 1x31 and 31x1, groups=3,
reflect padding), then blurred again by FFT convolution (rfft2 of the zero-padded image and kernel,
complex product, irfft2, crop); per-channel 256-bin histograms of uint8 images by bincount of
channel-offset indices (fixed minlength) and by torch.histc, histogram equalization through a cumsum
CDF lookup table indexed with gather; a 3x3 median filter by F.unfold + median on a fp16 crop;
then point clouds: farthest point sampling (a fixed 1024-iteration loop over 8 clouds of 65536
points, running min distance updated in place), kNN of the sampled centers (torch.cdist + topk k=32
over all points, in float32), neighbourhood covariances and normals by batched torch.linalg.eigh.

Phases: 0 images loaded; 1 separable blur; 2 FFT convolution; 3 histograms, equalization and median
filter; 4 farthest point sampling; 5 kNN and normals."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3224)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, H, W = (2, 128, 128) if SMALL else (16, 1024, 1024)
KS = 31
NC, NPTS, NS, KNN = (2, 2048, 64, 8) if SMALL else (8, 65536, 1024, 32)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


img_u8 = torch.randint(0, 256, (B, 3, H, W), dtype=torch.uint8, device=device)
img = img_u8.float().div_(255.0)
report("images")

sig = 5.0
x = torch.arange(KS, device=device, dtype=torch.float32) - KS // 2
g1 = torch.exp(-(x**2) / (2 * sig**2))
g1 = g1 / g1.sum()
kh = g1.view(1, 1, 1, KS).repeat(3, 1, 1, 1)
kv = g1.view(1, 1, KS, 1).repeat(3, 1, 1, 1)
padded = F.pad(img, (KS // 2, KS // 2, 0, 0), mode="reflect")
tmp = F.conv2d(padded, kh, groups=3)
del padded
padded = F.pad(tmp, (0, 0, KS // 2, KS // 2), mode="reflect")
blur = F.conv2d(padded, kv, groups=3)
del padded, tmp
print(f"blur mean {blur.mean().item():.4f}")
report("separable")

k2 = (g1[:, None] * g1[None, :]).view(1, 1, KS, KS)
FH, FW = H + KS - 1, W + KS - 1
Fi = torch.fft.rfft2(img, s=(FH, FW))
Fk = torch.fft.rfft2(k2, s=(FH, FW))
Fi.mul_(Fk)
full = torch.fft.irfft2(Fi, s=(FH, FW))
fft_blur = full[..., KS // 2 : KS // 2 + H, KS // 2 : KS // 2 + W].contiguous()
del Fi, Fk, full
print(f"fft vs direct {(fft_blur - blur).abs().mean().item():.4f}")
del blur
report("fft")

flat = img_u8.long().view(B * 3, -1)
offs = (torch.arange(B * 3, device=device) * 256)[:, None]
hist = torch.bincount((flat + offs).view(-1), minlength=B * 3 * 256).view(B * 3, 256)
hist_c = torch.histc(img[:, 0].reshape(-1), bins=256, min=0.0, max=1.0)
cdf = hist.cumsum(1).float()
cdf = (cdf - cdf[:, :1]) / (cdf[:, -1:] - cdf[:, :1]).clamp_min(1.0)
lut = (cdf * 255.0).round_().to(torch.uint8)
eq = torch.gather(lut, 1, flat).view(B, 3, H, W)
del flat, offs
crop = fft_blur[:, :, : H // 2, : W // 2].half()
cols = F.unfold(crop.reshape(B * 3, 1, H // 2, W // 2), kernel_size=3, padding=1)
med = cols.median(dim=1).values.view(B, 3, H // 2, W // 2)
print(f"hist {hist.sum().item()} histc {hist_c.sum().item():.0f} eq {eq.float().mean().item():.2f}")
del cols, crop, fft_blur
report("hist_median")

pts = torch.randn(NC, NPTS, 3, device=device) * torch.tensor([1.0, 0.5, 0.1], device=device)
centroids = torch.empty(NC, NS, dtype=torch.long, device=device)
dist = torch.full((NC, NPTS), float("inf"), device=device)
farthest = torch.randint(0, NPTS, (NC,), device=device)
bidx = torch.arange(NC, device=device)
for i in range(NS):
    centroids[:, i] = farthest
    c = pts[bidx, farthest].unsqueeze(1)
    d = (pts - c).pow(2).sum(-1)
    torch.minimum(dist, d, out=dist)
    farthest = dist.argmax(-1)
centers = torch.gather(pts, 1, centroids.unsqueeze(-1).expand(-1, -1, 3))
print(f"fps spread {dist.max().item():.4f}")
report("fps")

dmat = torch.cdist(centers, pts)
knn_d, knn_i = dmat.topk(KNN, dim=-1, largest=False)
del dmat
nbrs = torch.gather(pts.unsqueeze(1).expand(-1, NS, -1, -1), 2, knn_i.unsqueeze(-1).expand(-1, -1, -1, 3))
nbrs = nbrs - nbrs.mean(2, keepdim=True)
covs = nbrs.transpose(-1, -2) @ nbrs / KNN
evals, evecs = torch.linalg.eigh(covs)
normals = evecs[..., 0]
print(f"normals z {normals[..., 2].abs().mean().item():.3f} knn radius {knn_d[..., -1].mean().item():.4f}")
report("knn_normals")
