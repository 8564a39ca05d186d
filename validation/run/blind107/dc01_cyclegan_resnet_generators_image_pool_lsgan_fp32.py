"""CycleGAN unpaired translation: two ResNet generators (reflection-padded 7x7 stem, two stride-2
downsamplings, 6 residual blocks with InstanceNorm, two ConvTranspose2d upsamplings, tanh) and two
70x70 PatchGAN discriminators (InstanceNorm, LeakyReLU); least-squares GAN losses, cycle (10 x L1)
and identity (5 x L1) losses, one Adam over both generators' chained parameters and one over both
discriminators (betas 0.5, 0.999), LambdaLR linear decay, a history pool of 50 fakes per domain
(host random choices), batch 4 of 128 x 128 RGB images made on the GPU, fp32, 3 steps, then a
no_grad translation of 8 images each way; 4 phases."""

import itertools
import os
import random

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10701)
random.seed(10701)
B, R, NGF, NBLK, STEPS = (2, 32, 8, 2, 2) if SMALL else (4, 128, 64, 6, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
            nn.ReLU(True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(c, c, 3),
            nn.InstanceNorm2d(c),
        )

    def forward(self, x):
        return x + self.body(x)


def generator():
    layers = [nn.ReflectionPad2d(3), nn.Conv2d(3, NGF, 7), nn.InstanceNorm2d(NGF), nn.ReLU(True)]
    c = NGF
    for _ in range(2):
        layers += [nn.Conv2d(c, 2 * c, 3, 2, 1), nn.InstanceNorm2d(2 * c), nn.ReLU(True)]
        c *= 2
    layers += [ResBlock(c) for _ in range(NBLK)]
    for _ in range(2):
        layers += [
            nn.ConvTranspose2d(c, c // 2, 3, 2, 1, output_padding=1),
            nn.InstanceNorm2d(c // 2),
            nn.ReLU(True),
        ]
        c //= 2
    layers += [nn.ReflectionPad2d(3), nn.Conv2d(c, 3, 7), nn.Tanh()]
    return nn.Sequential(*layers)


def discriminator():
    return nn.Sequential(
        nn.Conv2d(3, 64, 4, 2, 1),
        nn.LeakyReLU(0.2, True),
        nn.Conv2d(64, 128, 4, 2, 1),
        nn.InstanceNorm2d(128),
        nn.LeakyReLU(0.2, True),
        nn.Conv2d(128, 256, 4, 2, 1),
        nn.InstanceNorm2d(256),
        nn.LeakyReLU(0.2, True),
        nn.Conv2d(256, 512, 4, 1, 1),
        nn.InstanceNorm2d(512),
        nn.LeakyReLU(0.2, True),
        nn.Conv2d(512, 1, 4, 1, 1),
    )


class ImagePool:
    """The history buffer of the CycleGAN paper: half the time a stored fake replaces the new one."""

    def __init__(self, size=50):
        self.size, self.images = size, []

    def query(self, images):
        out = []
        for img in images.detach():
            img = img.unsqueeze(0)
            if len(self.images) < self.size:
                self.images.append(img)
                out.append(img)
            elif random.random() > 0.5:
                i = random.randrange(self.size)
                out.append(self.images[i].clone())
                self.images[i] = img
            else:
                out.append(img)
        return torch.cat(out, 0)


def domain_a(n):
    return torch.tanh(torch.randn(n, 3, R, R, device=device).cumsum(-1) / 8)


def domain_b(n):
    return torch.sin(torch.randn(n, 3, R, R, device=device).cumsum(-2) / 4)


G_ab, G_ba, D_a, D_b = (m.to(device) for m in (generator(), generator(), discriminator(), discriminator()))
opt_g = torch.optim.Adam(itertools.chain(G_ab.parameters(), G_ba.parameters()), lr=2e-4, betas=(0.5, 0.999))
opt_d = torch.optim.Adam(itertools.chain(D_a.parameters(), D_b.parameters()), lr=2e-4, betas=(0.5, 0.999))
decay = lambda epoch: 1.0 - max(0, epoch - 100) / 101  # noqa: E731
sched_g = torch.optim.lr_scheduler.LambdaLR(opt_g, decay)
sched_d = torch.optim.lr_scheduler.LambdaLR(opt_d, decay)
pool_a, pool_b = ImagePool(), ImagePool()
mse, l1 = nn.MSELoss(), nn.L1Loss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    real_a, real_b = domain_a(B), domain_b(B)
    for p in itertools.chain(D_a.parameters(), D_b.parameters()):
        p.requires_grad_(False)
    fake_b, fake_a = G_ab(real_a), G_ba(real_b)
    rec_a, rec_b = G_ba(fake_b), G_ab(fake_a)
    pred_fb, pred_fa = D_b(fake_b), D_a(fake_a)
    loss_g = (
        mse(pred_fb, torch.ones_like(pred_fb))
        + mse(pred_fa, torch.ones_like(pred_fa))
        + 10.0 * (l1(rec_a, real_a) + l1(rec_b, real_b))
        + 5.0 * (l1(G_ba(real_a), real_a) + l1(G_ab(real_b), real_b))
    )
    opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    opt_g.step()
    for p in itertools.chain(D_a.parameters(), D_b.parameters()):
        p.requires_grad_(True)
    opt_d.zero_grad(set_to_none=True)
    loss_d = 0.0
    for D, real, fake in ((D_a, real_a, pool_a.query(fake_a)), (D_b, real_b, pool_b.query(fake_b))):
        p_real, p_fake = D(real), D(fake)
        loss = 0.5 * (mse(p_real, torch.ones_like(p_real)) + mse(p_fake, torch.zeros_like(p_fake)))
        loss.backward()
        loss_d = loss_d + loss.item()
    opt_d.step()
    sched_g.step()
    sched_d.step()
    if device == "cuda":
        print(
            f"step {step} g {loss_g.item():.3f} d {loss_d:.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del real_a, real_b, fake_a, fake_b, rec_a, rec_b, pred_fa, pred_fb, loss_g, p_real, p_fake, loss
G_ab.eval()
G_ba.eval()
with torch.no_grad():
    out_b = G_ab(domain_a(8))
    out_a = G_ba(domain_b(8))
if device == "cuda":
    print(
        f"translate {tuple(out_b.shape)} {tuple(out_a.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
