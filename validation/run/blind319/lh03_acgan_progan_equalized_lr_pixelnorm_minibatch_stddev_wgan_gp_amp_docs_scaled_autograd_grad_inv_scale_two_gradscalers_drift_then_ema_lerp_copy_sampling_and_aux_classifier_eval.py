"""A class-conditional GAN on 32 x 32 images that mixes the auxiliary-classifier GAN (Odena et al.,
AC-GAN: the discriminator also predicts the class, both networks add its cross-entropy) with the
Progressive-GAN tricks written by hand (Karras et al. 2018): equalized learning rate (weights drawn from
N(0, 1) and multiplied by He's constant at run time in ``F.conv2d`` / ``F.linear``), PixelNorm in the
generator, a minibatch standard-deviation channel before the discriminator's last block, and the WGAN-GP
loss with ProGAN's drift term. The gradient penalty follows the PyTorch AMP docs' "gradient penalty"
recipe: ``torch.autograd.grad(scaler.scale(out), inputs, create_graph=True)``, then the grads multiplied
by ``1 / scaler.get_scale()`` before the penalty is formed under autocast. Two ``GradScaler`` objects,
one per network (fp16 autocast), Adam with betas (0, 0.99); the discriminator is frozen with
``requires_grad_(False)`` during the generator step; an EMA generator is updated the StyleGAN2-ADA way,
``p_ema.copy_(p.lerp(p_ema, beta))`` and buffers copied.

Phases: 0 networks, EMA copy and 4,096 real images; 1 fp16 autocast WGAN-GP + AC training, two scalers;
2 class-conditional sampling from the EMA generator in fp32 under no_grad (100 per class); 3 latent
interpolation (64 steps x 16 pairs) under inference_mode with fp16 autocast; 4 the discriminator's
auxiliary-classifier accuracy on 2,000 EMA samples under no_grad with bf16 autocast."""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2018)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


SQRT2 = math.sqrt(2.0)


class EqConv2d(nn.Module):
    def __init__(self, cin, cout, k, padding=0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, k, k))
        self.bias = nn.Parameter(torch.zeros(cout))
        self.scale = math.sqrt(2.0 / (cin * k * k))
        self.padding = padding

    def forward(self, x):
        return F.conv2d(x, self.weight * self.scale, self.bias, padding=self.padding)


class EqLinear(nn.Module):
    def __init__(self, fin, fout, gain=SQRT2):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(fout, fin))
        self.bias = nn.Parameter(torch.zeros(fout))
        self.scale = gain / math.sqrt(fin)

    def forward(self, x):
        return F.linear(x, self.weight * self.scale, self.bias)


class PixelNorm(nn.Module):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-8)


class MinibatchStdDev(nn.Module):
    def __init__(self, group_size=4):
        super().__init__()
        self.group_size = group_size

    def forward(self, x):
        b, c, h, w = x.shape
        g = min(self.group_size, b)
        y = x.reshape(g, -1, c, h, w)
        y = y - y.mean(dim=0, keepdim=True)
        y = y.pow(2).mean(dim=0)
        y = (y + 1e-8).sqrt()
        y = y.mean(dim=[1, 2, 3], keepdim=True)
        y = y.reshape(-1, 1, 1, 1).repeat(g, 1, h, w)
        return torch.cat([x, y], dim=1)


class Generator(nn.Module):
    def __init__(self, z_dim=128, n_classes=10, ch=256):
        super().__init__()
        self.ch = ch
        self.embed = nn.Embedding(n_classes, z_dim)
        self.fc = EqLinear(z_dim, ch * 4 * 4, gain=math.sqrt(2.0) / 4)
        self.blocks = nn.ModuleList()
        for cin, cout in [(ch, ch), (ch, ch // 2), (ch // 2, ch // 4)]:
            self.blocks.append(nn.ModuleList([EqConv2d(cin, cout, 3, 1), EqConv2d(cout, cout, 3, 1)]))
        self.to_rgb = EqConv2d(ch // 4, 3, 1)
        self.norm = PixelNorm()

    def forward(self, z, y):
        x = self.norm(z * self.embed(y))
        x = self.norm(F.leaky_relu(self.fc(x).view(-1, self.ch, 4, 4), 0.2))
        for conv1, conv2 in self.blocks:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            x = self.norm(F.leaky_relu(conv1(x), 0.2))
            x = self.norm(F.leaky_relu(conv2(x), 0.2))
        return self.to_rgb(x)


class Discriminator(nn.Module):
    def __init__(self, n_classes=10, ch=256):
        super().__init__()
        self.from_rgb = EqConv2d(3, ch // 4, 1)
        self.blocks = nn.ModuleList()
        for cin, cout in [(ch // 4, ch // 2), (ch // 2, ch), (ch, ch)]:
            self.blocks.append(nn.ModuleList([EqConv2d(cin, cin, 3, 1), EqConv2d(cin, cout, 3, 1)]))
        self.mbstd = MinibatchStdDev(4)
        self.final_conv = EqConv2d(ch + 1, ch, 3, 1)
        self.final_fc = EqLinear(ch * 4 * 4, ch)
        self.adv = EqLinear(ch, 1, gain=1.0)
        self.cls = EqLinear(ch, n_classes, gain=1.0)

    def forward(self, img):
        x = F.leaky_relu(self.from_rgb(img), 0.2)
        for conv1, conv2 in self.blocks:
            x = F.leaky_relu(conv1(x), 0.2)
            x = F.leaky_relu(conv2(x), 0.2)
            x = F.avg_pool2d(x, 2)
        x = self.mbstd(x)
        x = F.leaky_relu(self.final_conv(x), 0.2)
        x = F.leaky_relu(self.final_fc(x.flatten(1)), 0.2)
        return self.adv(x).squeeze(1), self.cls(x)


z_dim, n_classes, batch = 128, 10, 64
real_images = torch.rand(4096, 3, 32, 32, device=device) * 2 - 1
real_labels = torch.randint(0, n_classes, (4096,), device=device)
G = Generator(z_dim, n_classes).to(device)
D = Discriminator(n_classes).to(device)
G_ema = copy.deepcopy(G).eval().requires_grad_(False)
opt_g = torch.optim.Adam(G.parameters(), lr=1e-3, betas=(0.0, 0.99), eps=1e-8)
opt_d = torch.optim.Adam(D.parameters(), lr=1e-3, betas=(0.0, 0.99), eps=1e-8)
scaler_g = torch.amp.GradScaler("cuda", init_scale=2.0**10)
scaler_d = torch.amp.GradScaler("cuda", init_scale=2.0**10)
ema_beta = 0.5 ** (batch / (10 * 1000))
report("networks, ema copy and real images")

for step in range(8):
    idx = torch.randint(0, real_images.shape[0], (batch,), device=device)
    real, y = real_images[idx], real_labels[idx]

    # discriminator step
    D.requires_grad_(True)
    z = torch.randn(batch, z_dim, device=device)
    with torch.autocast("cuda", dtype=torch.float16):
        fake = G(z, y).detach()
        d_real, cls_real = D(real)
        d_fake, cls_fake = D(fake)
        alpha = torch.rand(batch, 1, 1, 1, device=device)
        interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        d_interp, _ = D(interp)
    scaled_grads = torch.autograd.grad(
        outputs=scaler_d.scale(d_interp.sum()), inputs=interp, create_graph=True
    )
    inv_scale = 1.0 / scaler_d.get_scale()
    grads = scaled_grads[0] * inv_scale
    with torch.autocast("cuda", dtype=torch.float16):
        gp = (grads.flatten(1).norm(2, dim=1) - 1).pow(2).mean()
        drift = d_real.float().pow(2).mean()
        ac_loss = F.cross_entropy(cls_real, y) + F.cross_entropy(cls_fake, y)
        loss_d = d_fake.float().mean() - d_real.float().mean() + 10.0 * gp + 0.001 * drift + ac_loss
    opt_d.zero_grad(set_to_none=True)
    scaler_d.scale(loss_d).backward()
    scaler_d.step(opt_d)
    scaler_d.update()

    # generator step, discriminator frozen
    D.requires_grad_(False)
    z = torch.randn(batch, z_dim, device=device)
    y_g = torch.randint(0, n_classes, (batch,), device=device)
    with torch.autocast("cuda", dtype=torch.float16):
        fake = G(z, y_g)
        d_fake, cls_fake = D(fake)
        loss_g = -d_fake.float().mean() + F.cross_entropy(cls_fake, y_g)
    opt_g.zero_grad(set_to_none=True)
    scaler_g.scale(loss_g).backward()
    scaler_g.step(opt_g)
    scaler_g.update()

    with torch.no_grad():
        for p_ema, p in zip(G_ema.parameters(), G.parameters(), strict=True):
            p_ema.copy_(p.lerp(p_ema, ema_beta))
        for b_ema, b in zip(G_ema.buffers(), G.buffers(), strict=True):
            b_ema.copy_(b)
    print(f"step {step} loss_d {loss_d.item():.3f} gp {gp.item():.3f} loss_g {loss_g.item():.3f}")
del real, fake, d_real, d_fake, cls_real, cls_fake, interp, d_interp, scaled_grads, grads, gp, loss_d, loss_g
report("fp16 autocast wgan-gp ac-gan training, two gradscalers, ema")

with torch.no_grad():
    labels = torch.arange(n_classes, device=device).repeat_interleave(100)
    samples = G_ema(torch.randn(labels.shape[0], z_dim, device=device), labels).clamp(-1, 1)
    print("ema samples", tuple(samples.shape), "std", samples.std().item())
report("ema class-conditional sampling fp32 no_grad")

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    z0 = torch.randn(16, 1, z_dim, device=device)
    z1 = torch.randn(16, 1, z_dim, device=device)
    t = torch.linspace(0, 1, 64, device=device).view(1, 64, 1)
    zs = (z0 * (1 - t) + z1 * t).reshape(-1, z_dim)
    ys = torch.arange(16, device=device).remainder(n_classes).repeat_interleave(64)
    frames = G_ema(zs, ys)
    print("interpolation frames", tuple(frames.shape))
report("latent interpolation inference_mode fp16")

correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for i in range(0, 2000, 500):
        ys = torch.arange(i, i + 500, device=device).remainder(n_classes)
        _, logits = D(G_ema(torch.randn(500, z_dim, device=device), ys))
        correct += int((logits.argmax(1) == ys).sum())
print("aux classifier accuracy on ema samples", correct / 2000)
report("aux classifier accuracy bf16 no_grad")
