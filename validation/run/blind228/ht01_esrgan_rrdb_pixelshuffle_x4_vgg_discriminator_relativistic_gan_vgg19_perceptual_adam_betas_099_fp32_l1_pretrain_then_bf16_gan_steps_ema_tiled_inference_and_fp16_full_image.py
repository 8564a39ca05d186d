"""ESRGAN by hand: an RRDB generator (nf 64, gc 32, 12 RRDB blocks of 3 residual dense blocks with
residual scaling 0.2, LeakyReLU 0.2), nearest-neighbour x2 upsampling twice is replaced by
PixelShuffle x2 twice (x4), and a VGG-style discriminator (conv 3x3 / 4x4 stride 2 pairs with BatchNorm,
128 x 128 input, linear 100 -> 1). Perceptual loss through torchvision vgg19(weights=None).features up
to conv5_4 (before ReLU), frozen (requires_grad False, eval). Relativistic average GAN loss (BCE with
logits on real - mean(fake) and fake - mean(real)). Adam lr 1e-4 betas (0.9, 0.99) for both nets.
An EMA generator (decay 0.999) updated with torch._foreach_lerp_.

Phases: 3 PSNR-oriented L1 pretraining steps in fp32 at batch 16 (LR 48 x 48 -> HR 192 x 192);
3 GAN steps (LR 32 -> HR 128) (L1 0.01 + perceptual 1.0 + RaGAN 0.005) under bf16 autocast at batch 16; the EMA generator
under inference_mode over a 256 x 256 LR image in 64 x 64 tiles with 8-pixel overlap (output 1024 x
1024, tile outputs cropped and pasted); empty_cache() then the EMA generator in pure fp16 (.half())
on a full 192 x 192 LR image at batch 2. 4 phases."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

torch.manual_seed(2281)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class ResidualDenseBlock(nn.Module):
    def __init__(self, nf=64, gc=32):
        super().__init__()
        self.c1 = nn.Conv2d(nf, gc, 3, 1, 1)
        self.c2 = nn.Conv2d(nf + gc, gc, 3, 1, 1)
        self.c3 = nn.Conv2d(nf + 2 * gc, gc, 3, 1, 1)
        self.c4 = nn.Conv2d(nf + 3 * gc, gc, 3, 1, 1)
        self.c5 = nn.Conv2d(nf + 4 * gc, nf, 3, 1, 1)
        self.act = nn.LeakyReLU(0.2, inplace=True)

    def forward(self, x):
        x1 = self.act(self.c1(x))
        x2 = self.act(self.c2(torch.cat((x, x1), 1)))
        x3 = self.act(self.c3(torch.cat((x, x1, x2), 1)))
        x4 = self.act(self.c4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.c5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, nf=64, gc=32):
        super().__init__()
        self.b1 = ResidualDenseBlock(nf, gc)
        self.b2 = ResidualDenseBlock(nf, gc)
        self.b3 = ResidualDenseBlock(nf, gc)

    def forward(self, x):
        return self.b3(self.b2(self.b1(x))) * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, nf=64, nb=12, gc=32):
        super().__init__()
        self.conv_first = nn.Conv2d(3, nf, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(nf, gc) for _ in range(nb)])
        self.conv_body = nn.Conv2d(nf, nf, 3, 1, 1)
        self.up = nn.Sequential(
            nn.Conv2d(nf, nf * 4, 3, 1, 1), nn.PixelShuffle(2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(nf, nf * 4, 3, 1, 1), nn.PixelShuffle(2), nn.LeakyReLU(0.2, inplace=True),
        )
        self.conv_hr = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_last = nn.Conv2d(nf, 3, 3, 1, 1)
        self.act = nn.LeakyReLU(0.2, inplace=True)

    def forward(self, x):
        fea = self.conv_first(x)
        fea = fea + self.conv_body(self.body(fea))
        fea = self.up(fea)
        return self.conv_last(self.act(self.conv_hr(fea)))


class VGGDiscriminator(nn.Module):
    def __init__(self, nf=64):
        super().__init__()
        layers = [nn.Conv2d(3, nf, 3, 1, 1), nn.LeakyReLU(0.2, True),
                  nn.Conv2d(nf, nf, 4, 2, 1, bias=False), nn.BatchNorm2d(nf), nn.LeakyReLU(0.2, True)]
        c = nf
        for mult in (2, 4, 8, 8):
            o = nf * mult
            layers += [nn.Conv2d(c, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(0.2, True),
                       nn.Conv2d(o, o, 4, 2, 1, bias=False), nn.BatchNorm2d(o), nn.LeakyReLU(0.2, True)]
            c = o
        self.features = nn.Sequential(*layers)
        self.linear1 = nn.Linear(c * 4 * 4, 100)
        self.linear2 = nn.Linear(100, 1)

    def forward(self, x):
        f = self.features(x).flatten(1)
        return self.linear2(F.leaky_relu(self.linear1(f), 0.2))


gen = RRDBNet().to(device)
disc = VGGDiscriminator().to(device)
vgg = torchvision.models.vgg19(weights=None).features[:35].to(device).eval()
for p in vgg.parameters():
    p.requires_grad_(False)
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)

ema = copy.deepcopy(gen).eval()
for p in ema.parameters():
    p.requires_grad_(False)
ema_params = list(ema.parameters())
gen_params = list(gen.parameters())

opt_g = torch.optim.Adam(gen.parameters(), lr=1e-4, betas=(0.9, 0.99))
opt_d = torch.optim.Adam(disc.parameters(), lr=1e-4, betas=(0.9, 0.99))


def batch(n=16, lr=32):
    hr = torch.rand(n, 3, lr * 4, lr * 4, device=device)
    lq = F.interpolate(hr, scale_factor=0.25, mode="bicubic", align_corners=False).clamp_(0, 1)
    return lq, hr


def ema_update(decay=0.999):
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, gen_params, 1 - decay)


# phase 1: fp32 L1 pretraining
for _ in range(3):
    lq, hr = batch(16, 48)
    sr = gen(lq)
    loss = F.l1_loss(sr, hr)
    opt_g.zero_grad(set_to_none=True)
    loss.backward()
    opt_g.step()
    ema_update()
    print(f"l1 {loss.item():.4f}")
report("fp32 l1 pretrain")


def perceptual(sr, hr):
    fs = vgg((sr - mean) / std)
    with torch.no_grad():
        fh = vgg((hr - mean) / std)
    return F.l1_loss(fs, fh)


# phase 2: GAN steps under bf16 autocast
for _ in range(3):
    lq, hr = batch()
    # generator
    for p in disc.parameters():
        p.requires_grad_(False)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        sr = gen(lq)
        l_pix = F.l1_loss(sr, hr)
        l_per = perceptual(sr, hr)
        real_pred = disc(hr).detach()
        fake_pred = disc(sr)
    l_gan = (F.binary_cross_entropy_with_logits(real_pred.float() - fake_pred.float().mean(),
                                                torch.zeros_like(real_pred, dtype=torch.float32))
             + F.binary_cross_entropy_with_logits(fake_pred.float() - real_pred.float().mean(),
                                                  torch.ones_like(fake_pred, dtype=torch.float32))) / 2
    loss_g = 0.01 * l_pix + 1.0 * l_per + 0.005 * l_gan
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    ema_update()
    # discriminator
    for p in disc.parameters():
        p.requires_grad_(True)
    opt_d.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        fake_d = disc(sr.detach()).float()
        real_d = disc(hr).float()
    l_real = F.binary_cross_entropy_with_logits(real_d - fake_d.detach().mean(), torch.ones_like(real_d)) * 0.5
    l_real.backward()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        fake_d = disc(sr.detach()).float()
    l_fake = F.binary_cross_entropy_with_logits(fake_d - real_d.detach().mean(), torch.zeros_like(fake_d)) * 0.5
    l_fake.backward()
    opt_d.step()
    print(f"g {loss_g.item():.4f} d {(l_real + l_fake).item():.4f}")
del sr, lq, hr, real_pred, fake_pred, fake_d, real_d, loss_g, l_real, l_fake, l_pix, l_per, l_gan
report("bf16 gan")

# phase 3: tiled inference with the EMA generator
img = torch.rand(1, 3, 256, 256, device=device)
tile, pad, scale = 64, 8, 4
out = torch.zeros(1, 3, 256 * scale, 256 * scale, device=device)
with torch.inference_mode():
    for y in range(0, 256, tile):
        for x in range(0, 256, tile):
            y0, x0 = max(y - pad, 0), max(x - pad, 0)
            y1, x1 = min(y + tile + pad, 256), min(x + tile + pad, 256)
            o = ema(img[:, :, y0:y1, x0:x1])
            oy, ox = (y - y0) * scale, (x - x0) * scale
            out[:, :, y * scale:(y + tile) * scale, x * scale:(x + tile) * scale] = \
                o[:, :, oy:oy + tile * scale, ox:ox + tile * scale]
print("tiled", out.shape, out.mean().item())
del out, o
report("ema tiled inference")

# phase 4: full image in pure fp16
opt_g.zero_grad(set_to_none=True)
opt_d.zero_grad(set_to_none=True)
torch.cuda.empty_cache()
ema_h = ema.half()
with torch.inference_mode():
    sr = ema_h(torch.rand(2, 3, 192, 192, device=device, dtype=torch.float16))
print("full fp16", sr.shape, sr.float().mean().item())
report("fp16 full image")
