"""StyleGAN2's modulated convolutions written by hand: per-sample weights (style modulation and
demodulation) applied as one grouped convolution with groups = batch, a mapping network, noise
injection and upsampling; a ResNet discriminator trained with the R1 penalty (the gradient of the
real scores w.r.t. the images by autograd.grad with create_graph=True); 128x128, batch 16, fp32,
Adam, 2 steps of D then G; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6403)
B, Z, C, S = (2, 16, 8, 16) if SMALL else (16, 512, 256, 128)


class ModConv(nn.Module):
    def __init__(self, cin, cout, k=3):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k))
        self.affine = nn.Linear(Z, cin)
        self.noise = nn.Parameter(torch.zeros(()))

    def forward(self, x, w):
        b, cin, h, wd = x.shape
        style = self.affine(w) + 1
        weight = self.weight[None] * style[:, None, :, None, None]
        weight = weight * torch.rsqrt(weight.pow(2).sum([2, 3, 4], keepdim=True) + 1e-8)
        x = x.reshape(1, b * cin, h, wd)
        out = F.conv2d(x, weight.reshape(-1, cin, *weight.shape[3:]), padding=1, groups=b)
        out = out.reshape(b, -1, h, wd)
        return F.leaky_relu(out + self.noise * torch.randn(b, 1, h, wd, device=x.device), 0.2)


class G(nn.Module):
    def __init__(self):
        super().__init__()
        self.mapping = nn.Sequential(*(m for _ in range(4) for m in (nn.Linear(Z, Z), nn.LeakyReLU(0.2))))
        self.const = nn.Parameter(torch.randn(1, C, 4, 4))
        n = 0
        size = 4
        while size < S:
            size *= 2
            n += 1
        self.convs = nn.ModuleList(ModConv(C, C) for _ in range(2 * n))
        self.to_rgb = nn.Conv2d(C, 3, 1)

    def forward(self, z):
        w = self.mapping(z)
        x = self.const.expand(z.shape[0], -1, -1, -1)
        for i in range(0, len(self.convs), 2):
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            x = self.convs[i + 1](self.convs[i](x, w), w)
        return self.to_rgb(x)


class D(nn.Module):
    def __init__(self):
        super().__init__()
        layers, c, size = [nn.Conv2d(3, C // 2, 3, padding=1)], C // 2, S
        while size > 4:
            layers += [nn.LeakyReLU(0.2), nn.Conv2d(c, C, 3, 2, 1)]
            c, size = C, size // 2
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(C * 16, 1)

    def forward(self, x):
        return self.head(self.body(x).flatten(1))


device = "cuda" if torch.cuda.is_available() else "cpu"
g, d = G().to(device), D().to(device)
opt_g = torch.optim.Adam(g.parameters(), lr=2e-3, betas=(0.0, 0.99))
opt_d = torch.optim.Adam(d.parameters(), lr=2e-3, betas=(0.0, 0.99))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    real = torch.randn(B, 3, S, S, device=device).requires_grad_()
    fake = g(torch.randn(B, Z, device=device)).detach()
    real_score = d(real)
    (grad,) = torch.autograd.grad(real_score.sum(), real, create_graph=True)
    loss_d = (
        F.softplus(d(fake)).mean() + F.softplus(-real_score).mean() + 5.0 * grad.pow(2).sum([1, 2, 3]).mean()
    )
    loss_d.backward()
    opt_d.step()
    opt_d.zero_grad(set_to_none=True)
    del real, fake, real_score, grad, loss_d
    loss_g = F.softplus(-d(g(torch.randn(B, Z, device=device)))).mean()
    loss_g.backward()
    opt_g.step()
    opt_g.zero_grad(set_to_none=True)
    opt_d.zero_grad(set_to_none=True)
    del loss_g
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
