"""An EG3D-like 3-D-aware GAN (Chan et al. 2022) by hand: a StyleGAN2-style triplane generator, a neural
volume renderer that decodes the triplanes by grid_sample, a super-resolution net, and a ResNet
discriminator with the R1 gradient penalty.

Generator: an 8-layer mapping network (z 512 + camera 25 -> w 512, leaky ReLU, equalized lr scaling), a
synthesis net from a learned 4 x 4 constant to 128 x 128 of modulated 3 x 3 convolutions (weight
demodulation; the per-sample weights applied as one grouped conv2d with groups = batch) with bilinear
upsampling and noise inputs, 96 output channels reshaped into three 32-channel planes (xy, xz, yz).
Rendering at 32 x 32 with 48 samples a ray: each point projected on the three planes and read by
F.grid_sample (bilinear, align_corners=False), the planes' features averaged and decoded by a 64-wide MLP
into density and a 32-channel feature, alpha compositing, then a conv super-resolution net to 64 x 64 RGB.
Discriminator: conv ResNet 64 -> 4 x 4 with a minibatch-free head. Non-saturating logistic loss, R1 penalty
(gamma 1) on real images by torch.autograd.grad(create_graph=True) through the discriminator's convolutions,
Adam lr 0.0025 betas (0, 0.99) for both, batch 8.

Phases: 2 iterations (G step, D step with R1) in fp32; sampling 16 images at 128 x 128 render resolution
(the triplanes read at 128 x 128 x 48 points) under no_grad in batches of 4; then 4 iterations under bf16
autocast with lazy R1 (every second D step, scaled by 2). 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2123)
BATCH, PLANE_RES, RENDER, SAMPLES, EVAL_RENDER = (2, 32, 32, 8, 16) if SMALL else (8, 128, 32, 48, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class EqLinear(nn.Module):
    def __init__(self, din, dout, bias_init=0.0, lr_mul=1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dout, din) / lr_mul)
        self.bias = nn.Parameter(torch.full((dout,), float(bias_init)))
        self.scale = lr_mul / math.sqrt(din)
        self.lr_mul = lr_mul

    def forward(self, x):
        return F.linear(x, self.weight * self.scale, self.bias * self.lr_mul)


class Mapping(nn.Module):
    def __init__(self, zdim=512, cdim=25, wdim=512, layers=8):
        super().__init__()
        self.embed = EqLinear(cdim, wdim)
        self.net = nn.ModuleList([EqLinear(zdim + wdim if i == 0 else wdim, wdim, lr_mul=0.01) for i in range(layers)])

    def forward(self, z, c):
        x = torch.cat([F.normalize(z, dim=1) * math.sqrt(z.shape[1]), F.normalize(self.embed(c), dim=1)], dim=1)
        for layer in self.net:
            x = F.leaky_relu(layer(x), 0.2) * math.sqrt(2)
        return x


class ModConv(nn.Module):
    def __init__(self, cin, cout, wdim=512, up=False, demod=True, k=3):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k))
        self.affine = EqLinear(wdim, cin, bias_init=1.0)
        self.bias = nn.Parameter(torch.zeros(cout))
        self.noise_strength = nn.Parameter(torch.zeros(()))
        self.up, self.demod, self.pad = up, demod, k // 2

    def forward(self, x, w):
        b, cin, h, wd = x.shape
        if self.up:
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)
            h, wd = h * 2, wd * 2
        s = self.affine(w)
        weight = self.weight[None] * s[:, None, :, None, None] / math.sqrt(cin * self.weight[0, 0].numel())
        if self.demod:
            weight = weight * torch.rsqrt(weight.pow(2).sum(dim=(2, 3, 4), keepdim=True) + 1e-8)
        out = F.conv2d(x.reshape(1, b * cin, h, wd), weight.reshape(-1, cin, *self.weight.shape[2:]), padding=self.pad, groups=b)
        out = out.view(b, -1, h, wd)
        if self.demod:
            out = out + torch.randn(b, 1, h, wd, device=x.device, dtype=out.dtype) * self.noise_strength
            out = F.leaky_relu(out + self.bias.view(1, -1, 1, 1), 0.2) * math.sqrt(2)
        else:
            out = out + self.bias.view(1, -1, 1, 1)
        return out


class Synthesis(nn.Module):
    def __init__(self, res=128, out_ch=96):
        super().__init__()
        chans = {4: 512, 8: 512, 16: 512, 32: 512, 64: 256, 128: 128, 256: 128}
        self.const = nn.Parameter(torch.randn(512, 4, 4))
        self.convs, self.torgb = nn.ModuleList(), nn.ModuleList()
        self.convs.append(ModConv(512, 512))
        self.torgb.append(ModConv(512, out_ch, demod=False, k=1))
        r, cin = 8, 512
        while r <= res:
            self.convs.append(ModConv(cin, chans[r], up=True))
            self.convs.append(ModConv(chans[r], chans[r]))
            self.torgb.append(ModConv(chans[r], out_ch, demod=False, k=1))
            cin, r = chans[r], r * 2

    def forward(self, w):
        x = self.const.expand(w.shape[0], -1, -1, -1)
        x = self.convs[0](x, w)
        img = self.torgb[0](x, w)
        for i in range(1, len(self.convs), 2):
            x = self.convs[i + 1](self.convs[i](x, w), w)
            img = F.interpolate(img, scale_factor=2.0, mode="bilinear", align_corners=False) + self.torgb[(i + 1) // 2](x, w)
        return img


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.mapping = Mapping()
        self.synthesis = Synthesis(PLANE_RES)
        self.decoder = nn.Sequential(nn.Linear(32, 64), nn.Softplus(), nn.Linear(64, 33))
        self.superres = nn.Sequential(
            nn.Conv2d(32, 128, 3, padding=1), nn.LeakyReLU(0.2), nn.Upsample(scale_factor=2.0, mode="bilinear"),
            nn.Conv2d(128, 64, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(64, 3, 1),
        )

    def forward(self, z, c, render_res):
        w = self.mapping(z, c)
        planes = self.synthesis(w)
        b = planes.shape[0]
        planes = planes.view(b * 3, 32, PLANE_RES, PLANE_RES)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, render_res, device=z.device), torch.linspace(-1, 1, render_res, device=z.device), indexing="ij")
        origin = c[:, :3]
        d = F.normalize(torch.stack([xs, ys, torch.full_like(xs, -2.0)], -1).view(1, -1, 3) + 0.1 * c[:, None, 3:6], dim=-1)
        t = torch.linspace(2.25, 3.3, SAMPLES, device=z.device)
        pts = origin[:, None, None, :] * 0.35 + d[:, :, None, :] * (t[None, None, :, None] - 2.8)
        pts = pts.reshape(b, -1, 3)
        coords = torch.stack([pts[..., [0, 1]], pts[..., [0, 2]], pts[..., [1, 2]]], dim=1).reshape(b * 3, 1, -1, 2)
        feats = F.grid_sample(planes, coords, mode="bilinear", padding_mode="zeros", align_corners=False)
        feats = feats.view(b, 3, 32, -1).mean(1).transpose(1, 2)
        out = self.decoder(feats)
        sigma = F.softplus(out[..., :1] - 1.0).view(b, -1, SAMPLES)
        feat = (torch.sigmoid(out[..., 1:]) * 1.002 - 0.001).view(b, -1, SAMPLES, 32)
        alpha = 1 - torch.exp(-sigma * (1.05 / SAMPLES))
        trans = torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1 - alpha + 1e-10], dim=-1), dim=-1)[..., :-1]
        img = ((alpha * trans)[..., None] * feat).sum(2)
        img = img.transpose(1, 2).reshape(b, 32, render_res, render_res)
        return self.superres(img)


class DBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cin, 3, padding=1)
        self.conv2 = nn.Conv2d(cin, cout, 3, stride=2, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1, stride=2, bias=False)

    def forward(self, x):
        h = F.leaky_relu(self.conv2(F.leaky_relu(self.conv1(x), 0.2)), 0.2)
        return (self.skip(x) + h) / math.sqrt(2)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 128, 1)
        self.blocks = nn.Sequential(DBlock(128, 256), DBlock(256, 512), DBlock(512, 512), DBlock(512, 512))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(512 * 4 * 4, 512), nn.LeakyReLU(0.2), nn.Linear(512, 1))

    def forward(self, img, c=None):
        h = self.blocks(F.leaky_relu(self.stem(img), 0.2))
        return self.head(h)


G = Generator().to(device)
D = Discriminator().to(device)
opt_g = torch.optim.Adam(G.parameters(), lr=0.0025, betas=(0.0, 0.99))
opt_d = torch.optim.Adam(D.parameters(), lr=0.002, betas=(0.0, 0.99))


def cams(n):
    ang = torch.rand(n, 2, device=device)
    c = torch.randn(n, 25, device=device) * 0.1
    c[:, 0] = torch.sin(ang[:, 0] * math.pi - math.pi / 2) * 2.7
    c[:, 1] = ang[:, 1] - 0.5
    c[:, 2] = 2.7
    return c


def iteration(it, autocast=False, lazy=False):
    amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda")
    z, c = torch.randn(BATCH, 512, device=device), cams(BATCH)
    with torch.autocast(**amp):
        fake = G(z, c, RENDER)
        g_loss = F.softplus(-D(fake, c)).mean()
    opt_g.zero_grad(set_to_none=True)
    g_loss.backward()
    opt_g.step()

    real = torch.rand(BATCH, 3, 2 * RENDER, 2 * RENDER, device=device) * 2 - 1
    do_r1 = not lazy or it % 2 == 0
    real.requires_grad_(do_r1)
    with torch.autocast(**amp):
        with torch.no_grad():
            fake = G(torch.randn(BATCH, 512, device=device), c, RENDER)
        d_fake = D(fake, c)
        d_real = D(real, c)
        d_loss = F.softplus(d_fake).mean() + F.softplus(-d_real).mean()
    if do_r1:
        (grad,) = torch.autograd.grad(d_real.float().sum(), real, create_graph=True)
        r1 = grad.square().sum(dim=(1, 2, 3)).mean() * 0.5 * (2.0 if lazy else 1.0)
        d_loss = d_loss + r1
    opt_d.zero_grad(set_to_none=True)
    d_loss.backward()
    opt_d.step()
    return g_loss.item(), d_loss.item()


for it in range(2):
    g, d = iteration(it)
print(f"fp32 g {g:.4f} d {d:.4f}")
report("train")

G.eval()
with torch.no_grad():
    imgs = [G(torch.randn(4, 512, device=device), cams(4), EVAL_RENDER) for _ in range(4)]
    print(f"samples {torch.cat(imgs).shape} mean {torch.cat(imgs).mean().item():.4f}")
    del imgs
report("sample")

G.train()
for it in range(4):
    g, d = iteration(it, autocast=True, lazy=True)
print(f"bf16 lazy r1 g {g:.4f} d {d:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
