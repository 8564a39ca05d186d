"""Crop-type semantic segmentation over Sentinel-2 satellite image time series (PASTIS-like): U-TAE
(Garnot & Landrieu 2021) written by hand, then a small 3-D convolutional UNet on the same cubes.

Data: series of 10-band 128 x 128 patches with up to 30 acquisition dates (B x T x C x H x W, float32
made on the device), day-of-year dates per sample, series padded to 30 with a boolean pad mask (the last
0-6 dates of each sample are padding), 20 crop classes with class 0 as void (ignore_index 0).

U-TAE: a shared spatial encoder applied to every date with batch and time folded together (4 levels of
64, 64, 64, 128 channels, 3x3 conv + GroupNorm(4) + ReLU twice, strided 4x4 conv down-sampling); the
lightweight temporal attention encoder (L-TAE) runs per pixel at the lowest resolution (16 x 16): input
GroupNorm, 1x1 to d_model 256, sinusoidal day-of-year encoding, 16 heads with d_k 4 and a learned
master query per head, softmax over dates with padded dates masked to -inf, values the 256 channels
split into 16 groups, MLP 256 -> 128. The attention masks (16 heads x B x T x 16 x 16) are upsampled
bilinearly to every skip resolution and used to collapse each skip's dates by weighted group sums. The
decoder upsamples by ConvTranspose2d, concatenates the collapsed skips and ends in a 20-way 1x1 conv.
Batch 4, bf16 autocast, Adam (lr 1e-3), cross-entropy with ignore_index 0.

Phases: the first step; 3 more steps; evaluation of 16 series under torch.no_grad at batch 8 with a
confusion matrix accumulated on the device by bincount; then a 3-D UNet (Conv3d 3x3x3 + BatchNorm3d +
ReLU, 32/64/128 channels, pooling in space only, mean over time at the end, each encoder block under
torch.utils.checkpoint with use_reentrant=False) on 16-date 64 x 64 crops, fp32, SGD momentum 0.9, 3
steps at batch 4. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19305)
if SMALL:
    B, STEPS, T, HW, EVAL_N, EVAL_B, B3, T3, HW3 = 2, 1, 6, 32, 2, 2, 1, 4, 16
else:
    B, STEPS, T, HW, EVAL_N, EVAL_B, B3, T3, HW3 = 4, 3, 30, 128, 16, 8, 4, 16, 64
BANDS, N_CLASSES = 10, 20
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class ConvBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, padding_mode="reflect"),
            nn.GroupNorm(4, cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, padding_mode="reflect"),
            nn.GroupNorm(4, cout),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.net(x)


class DownBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.down = nn.Sequential(
            nn.Conv2d(cin, cin, 4, 2, 1, padding_mode="reflect"), nn.GroupNorm(4, cin), nn.ReLU()
        )
        self.conv = ConvBlock(cin, cout)

    def forward(self, x):
        return self.conv(self.down(x))


class LTAE(nn.Module):
    def __init__(self, cin=128, d_model=256, n_head=16, d_k=4, mlp_out=128, t_period=1000):
        super().__init__()
        self.n_head, self.d_k, self.d_model, self.t_period = n_head, d_k, d_model, t_period
        self.in_norm = nn.GroupNorm(n_head, cin)
        self.inconv = nn.Conv1d(cin, d_model, 1)
        self.Q = nn.Parameter(torch.randn(n_head, d_k) * (2.0 / d_k) ** 0.5)
        self.fc_k = nn.Linear(d_model, n_head * d_k)
        self.mlp = nn.Sequential(nn.Linear(d_model, mlp_out), nn.BatchNorm1d(mlp_out), nn.ReLU())
        self.out_norm = nn.GroupNorm(n_head, mlp_out)

    def pos_enc(self, doy):
        d = self.d_model // self.n_head
        denom = self.t_period ** (2 * (torch.arange(d, device=doy.device) // 2) / d)
        tab = doy[..., None].float() / denom
        tab[..., 0::2] = tab[..., 0::2].sin()
        tab[..., 1::2] = tab[..., 1::2].cos()
        return tab.repeat(1, 1, self.n_head)

    def forward(self, x, doy, pad):
        b, t, c, h, w = x.shape
        x = x.permute(0, 3, 4, 1, 2).reshape(b * h * w, t, c)
        x = self.in_norm(x.transpose(1, 2))
        x = self.inconv(x).transpose(1, 2)  # N, T, d_model
        pos = self.pos_enc(doy)[:, None, None].expand(-1, h, w, -1, -1).reshape(b * h * w, t, -1)
        x = x + pos
        k = self.fc_k(x).view(b * h * w, t, self.n_head, self.d_k).permute(2, 0, 1, 3)  # H, N, T, dk
        attn = torch.einsum("hd,hntd->hnt", self.Q, k) / math.sqrt(self.d_k)
        m = pad[:, None, None].expand(-1, h, w, -1).reshape(b * h * w, t)
        attn = attn.masked_fill(m[None], float("-inf")).softmax(-1)
        v = x.view(b * h * w, t, self.n_head, -1).permute(2, 0, 1, 3)  # H, N, T, d/H
        out = torch.einsum("hnt,hntd->nhd", attn, v).reshape(b * h * w, -1)
        out = self.mlp(out)
        out = self.out_norm(out.view(b, h, w, -1).permute(0, 3, 1, 2))
        attn = attn.view(self.n_head, b, h, w, t).permute(0, 1, 4, 2, 3)  # H, B, T, h, w
        return out, attn


def temporal_aggregate(feat, attn, pad):
    b, t, c, h, w = feat.shape
    n_head = attn.shape[0]
    a = F.interpolate(
        attn.reshape(n_head * b, t, *attn.shape[-2:]), size=(h, w), mode="bilinear", align_corners=False
    )
    a = a.view(n_head, b, t, 1, h, w)
    feat = feat.masked_fill(pad[:, :, None, None, None], 0.0)
    groups = torch.stack(feat.chunk(n_head, dim=2))  # H, B, T, C/H, h, w
    return (a * groups).sum(2).permute(1, 0, 2, 3, 4).reshape(b, c, h, w)


class UpBlock(nn.Module):
    def __init__(self, cin, cskip, cout):
        super().__init__()
        self.up = nn.Sequential(nn.ConvTranspose2d(cin, cout, 4, 2, 1), nn.BatchNorm2d(cout), nn.ReLU())
        self.skip = nn.Sequential(nn.Conv2d(cskip, cskip, 1), nn.BatchNorm2d(cskip), nn.ReLU())
        self.conv = ConvBlock(cout + cskip, cout)

    def forward(self, x, skip):
        return self.conv(torch.cat([self.up(x), self.skip(skip)], 1))


class UTAE(nn.Module):
    def __init__(self, widths=(64, 64, 64, 128), dec=(32, 32, 64, 128)):
        super().__init__()
        self.in_conv = ConvBlock(BANDS, widths[0])
        self.down = nn.ModuleList(DownBlock(widths[i], widths[i + 1]) for i in range(3))
        self.ltae = LTAE(cin=widths[-1], mlp_out=dec[-1])
        self.up = nn.ModuleList(UpBlock(dec[i + 1], widths[i], dec[i]) for i in reversed(range(3)))
        self.out = nn.Sequential(ConvBlock(dec[0], 32), nn.Conv2d(32, N_CLASSES, 1))

    def forward(self, x, doy, pad):
        b, t = x.shape[:2]
        f = self.in_conv(x.flatten(0, 1))
        feats = [f]
        for d in self.down:
            f = d(f)
            feats.append(f)
        feats = [q.view(b, t, *q.shape[1:]) for q in feats]
        out, attn = self.ltae(feats[-1], doy, pad)
        for i, up in enumerate(self.up):
            skip = temporal_aggregate(feats[-2 - i], attn, pad)
            out = up(out, skip)
        return self.out(out)


def series(n, t=T, hw=HW):
    x = torch.randn(n, t, BANDS, hw, hw, device=device)
    doy = torch.sort(torch.randint(0, 365, (n, t), device=device), dim=1).values
    n_pad = torch.randint(0, 7, (n,), device=device)
    pad = torch.arange(t, device=device)[None] >= (t - n_pad)[:, None]
    y = torch.randint(0, N_CLASSES, (n, hw, hw), device=device)
    return x, doy, pad, y


model = UTAE().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
print(f"U-TAE params {sum(p.numel() for p in model.parameters())}")


def step():
    x, doy, pad, y = series(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(model(x, doy, pad), y, ignore_index=0)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
conf = torch.zeros(N_CLASSES * N_CLASSES, dtype=torch.long, device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(0, EVAL_N, EVAL_B):
        x, doy, pad, y = series(EVAL_B)
        pred = model(x, doy, pad).argmax(1)
        conf += torch.bincount((y * N_CLASSES + pred).flatten(), minlength=N_CLASSES * N_CLASSES)
conf = conf.view(N_CLASSES, N_CLASSES)[1:, 1:].float()
miou = (conf.diag() / (conf.sum(0) + conf.sum(1) - conf.diag()).clamp(min=1)).mean()
print(f"eval mIoU {miou.item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def block3d(cin, cout):
    return nn.Sequential(
        nn.Conv3d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm3d(cout),
        nn.ReLU(inplace=True),
        nn.Conv3d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm3d(cout),
        nn.ReLU(inplace=True),
    )


class UNet3D(nn.Module):
    def __init__(self, widths=(32, 64, 128)):
        super().__init__()
        self.enc = nn.ModuleList(block3d(BANDS if i == 0 else widths[i - 1], w) for i, w in enumerate(widths))
        self.up = nn.ModuleList(
            nn.ConvTranspose3d(widths[i + 1], widths[i], (1, 2, 2), (1, 2, 2)) for i in reversed(range(2))
        )
        self.dec = nn.ModuleList(block3d(2 * widths[i], widths[i]) for i in reversed(range(2)))
        self.head = nn.Conv2d(widths[0], N_CLASSES, 1)

    def forward(self, x):
        skips = []
        for i, blk in enumerate(self.enc):
            x = checkpoint(blk, x, use_reentrant=False)
            if i < 2:
                skips.append(x)
                x = F.max_pool3d(x, (1, 2, 2))
        for up, blk in zip(self.up, self.dec, strict=True):
            x = blk(torch.cat([up(x), skips.pop()], 1))
        return self.head(x.mean(2))


model = opt = None
net3d = UNet3D().to(device)
opt3d = torch.optim.SGD(net3d.parameters(), lr=0.01, momentum=0.9)
net3d.train()
for s in range(3):
    x, _, _, y = series(B3, T3, HW3)
    loss = F.cross_entropy(net3d(x.transpose(1, 2)), y, ignore_index=0)
    opt3d.zero_grad(set_to_none=True)
    loss.backward()
    opt3d.step()
    print(f"3d unet step {s} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"3d allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
