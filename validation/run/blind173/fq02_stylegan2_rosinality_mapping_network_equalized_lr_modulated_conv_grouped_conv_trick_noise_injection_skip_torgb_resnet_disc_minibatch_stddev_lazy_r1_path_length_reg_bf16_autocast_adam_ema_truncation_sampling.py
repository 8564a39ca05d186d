"""StyleGAN2 config-F-like training as rosinality/stylegan2-pytorch (model.py, train.py) writes it,
with the up-sampling done by bilinear interpolation instead of upfirdn2d's FIR filter (no custom CUDA
op): a mapping network (PixelNorm, 8 EqualLinear of 512 with lr multiplier 0.01 and fused leaky ReLU
written as leaky_relu(x + b, 0.2) * sqrt(2)), a constant 4 x 4 input, StyledConvs whose
ModulatedConv2d forms per-sample weights (scale * weight * style, demodulated by rsqrt of the sum of
squares) and applies them as one grouped convolution (input viewed as (1, batch * in, H, W),
groups=batch), noise injection with a learned strength, ToRGB (modulated 1 x 1 conv without
demodulation) with skip connections up-sampled, 64 x 64 (channels 512 to 32 x 32, 256 at 64);
a ResNet discriminator (EqualConv2d, down-sampling by avg_pool2d, the minibatch-stddev layer of
group 4, EqualLinear head). Non-saturating logistic losses (softplus) under bf16 autocast; the lazy
regularizers in fp32: R1 every 4 discriminator steps (real images with requires_grad, the gradient of
the real scores' sum by autograd.grad with create_graph=True, 10 / 2 * R1 * 4 + 0 * real_pred[0]) and
the path-length penalty every 4 generator steps on half the batch (the gradient of (fake * noise /
sqrt(HW)).sum() with respect to the broadcast W latents, pl_mean as an EMA buffer, weight 2 * 4).
Adam with lr 0.002 * c and betas (0, 0.99 ** c), c = reg_every / (reg_every + 1), as train.py;
an EMA generator (g_ema, accumulate with decay 0.5 ** (32 / 10,000)); batch 32, mixing
probability 0.9; iteration 0 (both regularizers) its own phase, iterations 1-3 (none), iteration 4
(both again), then the truncation mean from 4,096 mapped codes and 64 samples from g_ema at
truncation 0.7 under no_grad; 4 phases."""

import copy
import math
import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import autograd

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17302)
random.seed(17302)
if SMALL:
    B, SIZE, STYLE, N_MLP, CH, ITERS, N_MEAN, N_SAMPLE = 4, 16, 32, 2, 32, 5, 64, 4
else:
    B, SIZE, STYLE, N_MLP, CH, ITERS, N_MEAN, N_SAMPLE = 32, 64, 512, 8, 512, 5, 4096, 64
R1, PATH_REG, PATH_BATCH_SHRINK, D_REG_EVERY, G_REG_EVERY, MIXING, LR = 10.0, 2.0, 2, 4, 4, 0.9, 0.002
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_device = "cuda" if device == "cuda" else "cpu"
CHANNELS = {4: CH, 8: CH, 16: CH, 32: CH, 64: CH // 2}


def fused_lrelu(x, bias):
    rest = [1] * (x.ndim - bias.ndim - 1)
    return F.leaky_relu(x + bias.view(1, bias.shape[0], *rest), 0.2) * math.sqrt(2)


class PixelNorm(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(torch.mean(x**2, dim=1, keepdim=True) + 1e-8)


class EqualLinear(nn.Module):
    def __init__(self, in_dim, out_dim, bias_init=0.0, lr_mul=1.0, activation=False):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_dim, in_dim).div_(lr_mul))
        self.bias = nn.Parameter(torch.zeros(out_dim).fill_(bias_init))
        self.activation = activation
        self.scale = (1 / math.sqrt(in_dim)) * lr_mul
        self.lr_mul = lr_mul

    def forward(self, x):
        if self.activation:
            return fused_lrelu(F.linear(x, self.weight * self.scale), self.bias * self.lr_mul)
        return F.linear(x, self.weight * self.scale, bias=self.bias * self.lr_mul)


class EqualConv2d(nn.Module):
    def __init__(self, cin, cout, k, stride=1, padding=0, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k))
        self.scale = 1 / math.sqrt(cin * k * k)
        self.stride, self.padding = stride, padding
        self.bias = nn.Parameter(torch.zeros(cout)) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight * self.scale, bias=self.bias, stride=self.stride, padding=self.padding)


class ModulatedConv2d(nn.Module):
    def __init__(self, cin, cout, k, style_dim, demodulate=True, upsample=False):
        super().__init__()
        self.eps, self.k, self.cin, self.cout = 1e-8, k, cin, cout
        self.upsample, self.demodulate = upsample, demodulate
        self.scale = 1 / math.sqrt(cin * k * k)
        self.padding = k // 2
        self.weight = nn.Parameter(torch.randn(1, cout, cin, k, k))
        self.modulation = EqualLinear(style_dim, cin, bias_init=1)

    def forward(self, x, style):
        batch, cin, h, w = x.shape
        style = self.modulation(style).view(batch, 1, cin, 1, 1)
        weight = self.scale * self.weight * style
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(batch, self.cout, 1, 1, 1)
        weight = weight.view(batch * self.cout, cin, self.k, self.k)
        if self.upsample:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            h, w = h * 2, w * 2
        x = x.reshape(1, batch * cin, h, w)
        out = F.conv2d(x, weight, padding=self.padding, groups=batch)
        return out.view(batch, self.cout, h, w)


class NoiseInjection(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))

    def forward(self, image, noise=None):
        if noise is None:
            b, _, h, w = image.shape
            noise = image.new_empty(b, 1, h, w).normal_()
        return image + self.weight * noise


class StyledConv(nn.Module):
    def __init__(self, cin, cout, k, style_dim, upsample=False):
        super().__init__()
        self.conv = ModulatedConv2d(cin, cout, k, style_dim, upsample=upsample)
        self.noise = NoiseInjection()
        self.activate_bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x, style):
        out = self.noise(self.conv(x, style))
        return fused_lrelu(out, self.activate_bias)


class ToRGB(nn.Module):
    def __init__(self, cin, style_dim, upsample=True):
        super().__init__()
        self.upsample = upsample
        self.conv = ModulatedConv2d(cin, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x, style, skip=None):
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + F.interpolate(skip, scale_factor=2, mode="bilinear", align_corners=False)
        return out


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [PixelNorm()] + [
            EqualLinear(STYLE, STYLE, lr_mul=0.01, activation=True) for _ in range(N_MLP)
        ]
        self.style = nn.Sequential(*layers)
        self.input = nn.Parameter(torch.randn(1, CHANNELS[4], 4, 4))
        self.conv1 = StyledConv(CHANNELS[4], CHANNELS[4], 3, STYLE)
        self.to_rgb1 = ToRGB(CHANNELS[4], STYLE, upsample=False)
        self.log_size = int(math.log2(SIZE))
        self.convs, self.to_rgbs = nn.ModuleList(), nn.ModuleList()
        cin = CHANNELS[4]
        for i in range(3, self.log_size + 1):
            cout = CHANNELS[2**i]
            self.convs.append(StyledConv(cin, cout, 3, STYLE, upsample=True))
            self.convs.append(StyledConv(cout, cout, 3, STYLE))
            self.to_rgbs.append(ToRGB(cout, STYLE))
            cin = cout
        self.n_latent = self.log_size * 2 - 2

    def mean_latent(self, n):
        z = torch.randn(n, STYLE, device=self.input.device)
        return self.style(z).mean(0, keepdim=True)

    def forward(self, styles, return_latents=False, truncation=1.0, truncation_latent=None):
        styles = [self.style(s) for s in styles]
        if truncation < 1:
            styles = [truncation_latent + truncation * (s - truncation_latent) for s in styles]
        if len(styles) < 2:
            latent = styles[0].unsqueeze(1).repeat(1, self.n_latent, 1)
        else:
            inject_index = random.randint(1, self.n_latent - 1)
            latent = styles[0].unsqueeze(1).repeat(1, inject_index, 1)
            latent2 = styles[1].unsqueeze(1).repeat(1, self.n_latent - inject_index, 1)
            latent = torch.cat([latent, latent2], 1)
        out = self.input.repeat(latent.shape[0], 1, 1, 1)
        out = self.conv1(out, latent[:, 0])
        skip = self.to_rgb1(out, latent[:, 1])
        i = 1
        for conv1, conv2, to_rgb in zip(self.convs[::2], self.convs[1::2], self.to_rgbs, strict=True):
            out = conv1(out, latent[:, i])
            out = conv2(out, latent[:, i + 1])
            skip = to_rgb(out, latent[:, i + 2], skip)
            i += 2
        return (skip, latent) if return_latents else (skip, None)


class ResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = EqualConv2d(cin, cin, 3, padding=1, bias=False)
        self.b1 = nn.Parameter(torch.zeros(cin))
        self.conv2 = EqualConv2d(cin, cout, 3, padding=1, bias=False)
        self.b2 = nn.Parameter(torch.zeros(cout))
        self.skip = EqualConv2d(cin, cout, 1, bias=False)

    def forward(self, x):
        out = fused_lrelu(self.conv1(x), self.b1)
        out = fused_lrelu(self.conv2(F.avg_pool2d(out, 2)), self.b2)
        skip = self.skip(F.avg_pool2d(x, 2))
        return (out + skip) / math.sqrt(2)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        log_size = int(math.log2(SIZE))
        self.from_rgb = EqualConv2d(3, CHANNELS[SIZE], 1, bias=False)
        self.b0 = nn.Parameter(torch.zeros(CHANNELS[SIZE]))
        blocks, cin = [], CHANNELS[SIZE]
        for i in range(log_size, 2, -1):
            cout = CHANNELS[2 ** (i - 1)]
            blocks.append(ResBlock(cin, cout))
            cin = cout
        self.convs = nn.Sequential(*blocks)
        self.stddev_group, self.stddev_feat = 4, 1
        self.final_conv = EqualConv2d(cin + 1, CHANNELS[4], 3, padding=1, bias=False)
        self.bf = nn.Parameter(torch.zeros(CHANNELS[4]))
        self.final_linear = nn.Sequential(
            EqualLinear(CHANNELS[4] * 4 * 4, CHANNELS[4], activation=True), EqualLinear(CHANNELS[4], 1)
        )

    def forward(self, x):
        out = self.convs(fused_lrelu(self.from_rgb(x), self.b0))
        batch, channel, height, width = out.shape
        group = min(batch, self.stddev_group)
        stddev = out.view(group, -1, self.stddev_feat, channel // self.stddev_feat, height, width)
        stddev = torch.sqrt(stddev.var(0, unbiased=False) + 1e-8)
        stddev = stddev.mean([2, 3, 4], keepdims=True).squeeze(2)
        stddev = stddev.repeat(group, 1, height, width)
        out = torch.cat([out, stddev], 1)
        out = fused_lrelu(self.final_conv(out), self.bf)
        return self.final_linear(out.view(batch, -1))


def d_logistic_loss(real_pred, fake_pred):
    return F.softplus(-real_pred).mean() + F.softplus(fake_pred).mean()


def d_r1_loss(real_pred, real_img):
    (grad_real,) = autograd.grad(outputs=real_pred.sum(), inputs=real_img, create_graph=True)
    return grad_real.pow(2).reshape(grad_real.shape[0], -1).sum(1).mean()


def g_nonsaturating_loss(fake_pred):
    return F.softplus(-fake_pred).mean()


def g_path_regularize(fake_img, latents, mean_path_length, decay=0.01):
    noise = torch.randn_like(fake_img) / math.sqrt(fake_img.shape[2] * fake_img.shape[3])
    (grad,) = autograd.grad(outputs=(fake_img * noise).sum(), inputs=latents, create_graph=True)
    path_lengths = torch.sqrt(grad.pow(2).sum(2).mean(1))
    path_mean = mean_path_length + decay * (path_lengths.mean() - mean_path_length)
    path_penalty = (path_lengths - path_mean).pow(2).mean()
    return path_penalty, path_mean.detach(), path_lengths


def make_noise(batch, n_noise):
    if MIXING > 0 and random.random() < MIXING:
        return torch.randn(2, batch, STYLE, device=device).unbind(0)
    return [torch.randn(batch, STYLE, device=device)]


def requires_grad(model, flag=True):
    for p in model.parameters():
        p.requires_grad = flag


def accumulate(model1, model2, decay=0.999):
    par1 = dict(model1.named_parameters())
    par2 = dict(model2.named_parameters())
    for k in par1.keys():
        par1[k].data.mul_(decay).add_(par2[k].data, alpha=1 - decay)


generator = Generator().to(device)
discriminator = Discriminator().to(device)
g_ema = copy.deepcopy(generator).eval()
g_reg_ratio = G_REG_EVERY / (G_REG_EVERY + 1)
d_reg_ratio = D_REG_EVERY / (D_REG_EVERY + 1)
g_optim = torch.optim.Adam(
    generator.parameters(), lr=LR * g_reg_ratio, betas=(0**g_reg_ratio, 0.99**g_reg_ratio)
)
d_optim = torch.optim.Adam(
    discriminator.parameters(), lr=LR * d_reg_ratio, betas=(0**d_reg_ratio, 0.99**d_reg_ratio)
)
accum = 0.5 ** (32 / (10 * 1000))
mean_path_length = torch.tensor(0.0, device=device)
data_gen = torch.Generator().manual_seed(17302)
print(
    f"generator {sum(p.numel() for p in generator.parameters())}",
    f"d {sum(p.numel() for p in discriminator.parameters())}",
)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for i in range(ITERS):
    real_img = (torch.rand(B, 3, SIZE, SIZE, generator=data_gen) * 2 - 1).to(device)

    requires_grad(generator, False)
    requires_grad(discriminator, True)
    noise = make_noise(B, 1)
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        fake_img, _ = generator(noise)
        fake_pred = discriminator(fake_img)
        real_pred = discriminator(real_img)
        d_loss = d_logistic_loss(real_pred.float(), fake_pred.float())
    discriminator.zero_grad()
    d_loss.backward()
    d_optim.step()

    if i % D_REG_EVERY == 0:
        real_img.requires_grad = True
        real_pred = discriminator(real_img)
        r1_loss = d_r1_loss(real_pred, real_img)
        discriminator.zero_grad()
        (R1 / 2 * r1_loss * D_REG_EVERY + 0 * real_pred[0]).backward()
        d_optim.step()

    requires_grad(generator, True)
    requires_grad(discriminator, False)
    noise = make_noise(B, 1)
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        fake_img, _ = generator(noise)
        fake_pred = discriminator(fake_img)
        g_loss = g_nonsaturating_loss(fake_pred.float())
    generator.zero_grad()
    g_loss.backward()
    g_optim.step()

    if i % G_REG_EVERY == 0:
        path_batch_size = max(1, B // PATH_BATCH_SHRINK)
        noise = make_noise(path_batch_size, 1)
        fake_img, latents = generator(noise, return_latents=True)
        path_loss, mean_path_length, path_lengths = g_path_regularize(fake_img, latents, mean_path_length)
        generator.zero_grad()
        weighted_path_loss = PATH_REG * G_REG_EVERY * path_loss
        weighted_path_loss += 0 * fake_img[0, 0, 0, 0]
        weighted_path_loss.backward()
        g_optim.step()

    accumulate(g_ema, generator, accum)
    print(
        f"iter {i} d {d_loss.item():.3f} g {g_loss.item():.3f} r1 {r1_loss.item():.3f}"
        f" path {path_loss.item():.3f} mean_path {mean_path_length.item():.3f}"
    )
    if device == "cuda" and i in (0, 3, ITERS - 1):
        print(f"iter {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del real_img, fake_img, fake_pred, real_pred, d_loss, g_loss, r1_loss, path_loss, latents, path_lengths

with torch.no_grad():
    mean_latent = g_ema.mean_latent(N_MEAN)
    sample_z = torch.randn(N_SAMPLE, STYLE, device=device)
    sample, _ = g_ema([sample_z], truncation=0.7, truncation_latent=mean_latent)
    sample = ((sample.clamp(-1, 1) + 1) * 127.5).to(torch.uint8).cpu()
print(f"samples {tuple(sample.shape)} mean {sample.float().mean().item():.2f}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
