"""An nnU-Net-style 3D U-Net written by hand for CT-like volumes: 5 stages (32, 64, 128, 256, 320
channels) of two Conv3d 3x3x3 + GroupNorm(8) + LeakyReLU(0.01) blocks, strided Conv3d downsampling
(the first stride (1, 2, 2) for anisotropic spacing), ConvTranspose3d upsampling, skip concatenation
and deep supervision (1x1x1 heads at the three finest decoder levels, targets by nearest
`interpolate` of the label map, weights 1/2^k normalised); Dice + cross-entropy loss, bf16 autocast,
SGD with Nesterov momentum 0.99 and the poly schedule, 3 steps on batch 2 of 1x96x160x160 patches;
then sliding-window inference under inference_mode over a 1x160x320x320 volume with 50% overlap,
each window's softmax weighted by a Gaussian importance map accumulated into an fp32 volume with its
normaliser, and the argmax; 5 phases."""

import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13102)
NC = 4
if SMALL:
    WIDTHS, B, PATCH, VOL = (8, 16, 16, 32, 32), 1, (16, 32, 32), (24, 48, 48)
else:
    WIDTHS, B, PATCH, VOL = (32, 64, 128, 256, 320), 2, (96, 160, 160), (160, 320, 320)
STRIDES = [(1, 1, 1), (1, 2, 2), (2, 2, 2), (2, 2, 2), (2, 2, 2)]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def block(cin, cout, stride):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, stride, 1, bias=False),
        nn.GroupNorm(8, cout),
        nn.LeakyReLU(0.01, inplace=True),
        nn.Conv3d(cout, cout, 3, 1, 1, bias=False),
        nn.GroupNorm(8, cout),
        nn.LeakyReLU(0.01, inplace=True),
    )


class UNet3D(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.ModuleList()
        cin = 1
        for w, s in zip(WIDTHS, STRIDES, strict=True):
            self.enc.append(block(cin, w, s))
            cin = w
        self.up = nn.ModuleList()
        self.dec = nn.ModuleList()
        self.heads = nn.ModuleList()
        for i in range(len(WIDTHS) - 1, 0, -1):
            self.up.append(nn.ConvTranspose3d(WIDTHS[i], WIDTHS[i - 1], STRIDES[i], STRIDES[i]))
            self.dec.append(block(2 * WIDTHS[i - 1], WIDTHS[i - 1], 1))
            self.heads.append(nn.Conv3d(WIDTHS[i - 1], NC, 1))

    def forward(self, x):
        skips = []
        for e in self.enc:
            x = e(x)
            skips.append(x)
        x = skips.pop()
        outs = []
        for up, dec, head in zip(self.up, self.dec, self.heads, strict=True):
            x = dec(torch.cat([up(x), skips.pop()], 1))
            outs.append(head(x))
        return outs[::-1]  # finest first


def dice_ce(logits, target):
    ce = F.cross_entropy(logits, target)
    prob = logits.float().softmax(1)
    onehot = F.one_hot(target, NC).permute(0, 4, 1, 2, 3).float()
    dims = (0, 2, 3, 4)
    inter = (prob * onehot).sum(dims)
    den = prob.sum(dims) + onehot.sum(dims)
    return ce + 1 - ((2 * inter + 1e-5) / (den + 1e-5))[1:].mean()


model = UNet3D().to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.99, nesterov=True, weight_decay=3e-5)
sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=1000, power=0.9)
ds_w = torch.tensor([1 / 2**k for k in range(3)])
ds_w = ds_w / ds_w.sum()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, 1, *PATCH, device=device)
    y = torch.randint(0, NC, (B, 1, *PATCH), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        outs = model(x)
        loss = 0
        for k in range(3):
            yk = F.interpolate(y.float(), size=outs[k].shape[2:], mode="nearest").long()[:, 0]
            loss = loss + ds_w[k] * dice_ce(outs[k], yk)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 12)
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del outs, loss, x, y, yk


def gaussian_map(size, sigma_scale=1 / 8):
    axes = []
    for s in size:
        c = torch.arange(s, dtype=torch.float32, device=device) - (s - 1) / 2
        axes.append(torch.exp(-0.5 * (c / (s * sigma_scale)) ** 2))
    g = axes[0][:, None, None] * axes[1][None, :, None] * axes[2][None, None, :]
    g = g / g.max()
    return g.clamp(min=g[g > 0].min())


def starts(n, p):
    step = p // 2
    s = list(range(0, max(n - p, 0) + 1, step))
    if s[-1] != n - p:
        s.append(n - p)
    return s


model.eval()
vol = torch.randn(1, 1, *VOL, device=device)
gauss = gaussian_map(PATCH)
with torch.inference_mode():
    acc = torch.zeros(NC, *VOL, device=device)
    norm = torch.zeros(VOL, device=device)
    for z, yy, xx in itertools.product(*(starts(n, p) for n, p in zip(VOL, PATCH, strict=True))):
        sl = (slice(z, z + PATCH[0]), slice(yy, yy + PATCH[1]), slice(xx, xx + PATCH[2]))
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(vol[(0, slice(None), *sl)][None])[0]
        acc[(slice(None), *sl)] += logits[0].float().softmax(0) * gauss
        norm[sl] += gauss
    seg = (acc / norm).argmax(0)
if device == "cuda":
    print(
        f"sliding window {tuple(seg.shape)} fg {(seg > 0).float().mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
