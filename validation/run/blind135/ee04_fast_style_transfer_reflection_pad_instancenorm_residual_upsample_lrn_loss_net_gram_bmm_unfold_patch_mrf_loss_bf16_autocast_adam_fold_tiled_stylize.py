"""Fast neural style transfer (Johnson et al.'s transformer network as the PyTorch examples write
it: reflection-padded convolutions, InstanceNorm2d(affine=True), 5 residual blocks, nearest-upsample
+ conv decoding) trained against a frozen AlexNet-style loss network written by hand (ReLU +
nn.LocalResponseNorm + max-pool stages); content MSE at one stage, Gram-matrix style losses by
`bmm` at three stages, a CNNMRF-style patch loss (3 x 3 feature patches by nn.Unfold, each matched to
its nearest style patch by normalised cross-correlation) and total variation; bf16 autocast, Adam;
3 steps at batch 12 x 256 x 256; then a 1,600 x 1,600 image stylised under no_grad in overlapping
384 x 384 tiles (nn.Unfold of the padded image, tiles through the network in groups of 8, blended
back by nn.Fold and divided by the fold of ones); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13504)
B, RES, BIG, TILE, STRIDE, GROUP = (2, 64, 144, 64, 48, 4) if SMALL else (12, 256, 1600, 384, 320, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class ConvLayer(nn.Sequential):
    def __init__(self, cin, cout, k, stride=1):
        super().__init__(nn.ReflectionPad2d(k // 2), nn.Conv2d(cin, cout, k, stride))


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1, self.n1 = ConvLayer(c, c, 3), nn.InstanceNorm2d(c, affine=True)
        self.c2, self.n2 = ConvLayer(c, c, 3), nn.InstanceNorm2d(c, affine=True)

    def forward(self, x):
        return x + self.n2(self.c2(F.relu(self.n1(self.c1(x)))))


class Upsample(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = ConvLayer(cin, cout, 3)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2, mode="nearest"))


class TransformerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            ConvLayer(3, 32, 9), nn.InstanceNorm2d(32, affine=True), nn.ReLU(),
            ConvLayer(32, 64, 3, 2), nn.InstanceNorm2d(64, affine=True), nn.ReLU(),
            ConvLayer(64, 128, 3, 2), nn.InstanceNorm2d(128, affine=True), nn.ReLU(),
            *[Residual(128) for _ in range(5)],
            Upsample(128, 64), nn.InstanceNorm2d(64, affine=True), nn.ReLU(),
            Upsample(64, 32), nn.InstanceNorm2d(32, affine=True), nn.ReLU(),
            ConvLayer(32, 3, 9),
        )  # fmt: skip

    def forward(self, x):
        return self.net(x)


class LossNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.s1 = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.LocalResponseNorm(5, 1e-4, 0.75, 2.0)
        )
        self.s2 = nn.Sequential(
            nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2),
            nn.ReLU(),
            nn.LocalResponseNorm(5, 1e-4, 0.75, 2.0),
        )
        self.s3 = nn.Sequential(nn.MaxPool2d(3, 2), nn.Conv2d(192, 384, 3, padding=1), nn.ReLU())
        self.s4 = nn.Sequential(nn.Conv2d(384, 256, 3, padding=1), nn.ReLU())

    def forward(self, x):
        f1 = self.s1(x)
        f2 = self.s2(f1)
        f3 = self.s3(f2)
        return [f1, f2, f3, self.s4(f3)]


def gram(f):
    b, c, h, w = f.shape
    f = f.reshape(b, c, h * w)
    return torch.bmm(f, f.transpose(1, 2)) / (c * h * w)


def mrf_loss(f, style_patches):
    p = F.unfold(f, 3).transpose(1, 2)  # B, L, C*9
    pn = F.normalize(p, dim=-1)
    sn = F.normalize(style_patches, dim=-1)
    idx = (pn @ sn.t()).argmax(-1)
    return F.mse_loss(p, style_patches[idx])


mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
net = TransformerNet().to(device)
lossnet = LossNet().to(device).eval().requires_grad_(False)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
style = torch.rand(1, 3, RES, RES, device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    sfeat = lossnet((style - mean) / std)
    style_grams = [gram(f.float()) for f in sfeat[:3]]
    style_patches = F.unfold(sfeat[2].float(), 3)[0].t().contiguous()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.rand(B, 3, RES, RES, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        y = net(x)
        fy = lossnet((y - mean) / std)
        with torch.no_grad():
            fx = lossnet((x - mean) / std)
        content = F.mse_loss(fy[1].float(), fx[1].float())
        style_l = sum(
            F.mse_loss(gram(a.float()), g.expand(B, -1, -1)) for a, g in zip(fy[:3], style_grams, strict=True)
        )
        mrf = mrf_loss(fy[2].float(), style_patches)
        tv = (y[:, :, 1:] - y[:, :, :-1]).abs().mean() + (y[..., 1:] - y[..., :-1]).abs().mean()
        loss = content + 1e5 * style_l + 0.1 * mrf + 1e-2 * tv
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

net.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    img = torch.rand(1, 3, BIG, BIG, device=device)
    pad = (TILE - STRIDE) // 2
    padded = F.pad(img, (pad, pad, pad, pad), mode="reflect")
    size = padded.shape[-2:]
    tiles = F.unfold(padded, TILE, stride=STRIDE)  # 1, 3*T*T, L
    n = tiles.size(-1)
    tiles = tiles.transpose(1, 2).reshape(n, 3, TILE, TILE)
    outs = torch.cat([net(tiles[i : i + GROUP]).float() for i in range(0, n, GROUP)])
    cols = outs.reshape(n, 3 * TILE * TILE).t().unsqueeze(0)
    out = F.fold(cols, size, TILE, stride=STRIDE)
    norm = F.fold(torch.ones_like(cols), size, TILE, stride=STRIDE)
    out = (out / norm)[..., pad : pad + BIG, pad : pad + BIG].clamp(0, 1)
if device == "cuda":
    print(
        f"stylised {tuple(out.shape)} tiles {n} peak {torch.cuda.max_memory_allocated()}"
        f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
