"""Class-conditional flow matching with minibatch optimal-transport couplings (OT-CFM, Tong et al. 2023;
torchcfm's `OTPlanSampler` written with an entropic Sinkhorn plan on the GPU instead of POT): for each batch
of noise x0 and data x1, the squared-Euclidean cost `torch.cdist(x0, x1) ** 2` (flattened images), the plan
from 50 log-domain Sinkhorn iterations (`torch.logsumexp`), pairs drawn with `torch.multinomial` over the
flattened plan, the straight path x_t = (1 - t) x0 + t x1 with a small sigma, target x1 - x0. The velocity
model: a small U-Net at 32 x 32 (channels 96/192, GroupNorm + SiLU residual blocks, sinusoidal time
embedding + a 10-class `nn.Embedding` with an extra null class; labels dropped to null with p 0.1 for
classifier-free guidance), trained under bf16 autocast with AdamW (foreach) at batch 256 for 6 steps
(phase 1). Phase 2: 100 samples (10 per class) by a 20-step midpoint ODE solver with CFG scale 2 (the
conditional and null batches concatenated, `chunk(2)`), under `torch.no_grad` and bf16 autocast. Phase 3:
one-step distillation: a student (a deep copy of the teacher) maps noise to the teacher's 20-step ODE
outputs (made under no_grad at the start of each step, batch 64) with an L2 loss plus a perceptual loss on
frozen torchvision VGG16 features (`weights=None`, relu1_2 .. relu4_3 of `features[:23]`, images upsampled
to 64 x 64 by bilinear interpolation, fp32 VGG beside the bf16 student), Adam, 4 steps. Phase 4: 1,000
one-step samples from the student in `inference_mode` in chunks of 250 under bf16 autocast, mapped to
uint8. 4 phases."""

import copy
import math

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

torch.manual_seed(2975)
dev = "cuda"
NCLS = 10


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def timestep_embedding(t, dim):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = t[:, None].float() * 1000 * freqs[None]
    return torch.cat([args.cos(), args.sin()], -1)


class ResBlock(nn.Module):
    def __init__(self, cin, cout, emb):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, 1, 1)
        self.e = nn.Linear(emb, cout)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, 1, 1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, e):
        h = self.c1(F.silu(self.n1(x))) + self.e(F.silu(e))[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class VelocityUNet(nn.Module):
    def __init__(self, c1=96, c2=192, emb=384):
        super().__init__()
        self.t = nn.Sequential(nn.Linear(c1, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.y = nn.Embedding(NCLS + 1, emb)
        self.inp = nn.Conv2d(3, c1, 3, 1, 1)
        self.d1, self.d2 = ResBlock(c1, c1, emb), ResBlock(c1, c2, emb)
        self.m1, self.m2 = ResBlock(c2, c2, emb), ResBlock(c2, c2, emb)
        self.u2, self.u1 = ResBlock(c2 + c2, c2, emb), ResBlock(c2 + c1, c1, emb)
        self.out = nn.Sequential(nn.GroupNorm(32, c1), nn.SiLU(), nn.Conv2d(c1, 3, 3, 1, 1))
        self.c1 = c1

    def forward(self, x, t, y):
        e = self.t(timestep_embedding(t, self.c1)) + self.y(y)
        h1 = self.d1(self.inp(x), e)
        h2 = self.d2(F.avg_pool2d(h1, 2), e)
        h = self.m2(self.m1(F.avg_pool2d(h2, 2), e), e)
        h = self.u2(torch.cat([F.interpolate(h, scale_factor=2.0), h2], 1), e)
        h = self.u1(torch.cat([F.interpolate(h, scale_factor=2.0), h1], 1), e)
        return self.out(h)


def sinkhorn_pairs(x0, x1, reg=0.05, iters=50):
    n = x0.shape[0]
    cost = torch.cdist(x0.reshape(n, -1), x1.reshape(n, -1)) ** 2
    cost = cost / cost.max()
    log_k = -cost / reg
    log_a = torch.full((n,), -math.log(n), device=x0.device)
    u, v = torch.zeros_like(log_a), torch.zeros_like(log_a)
    for _ in range(iters):
        u = log_a - torch.logsumexp(log_k + v[None, :], 1)
        v = log_a - torch.logsumexp(log_k + u[:, None], 0)
    plan = (u[:, None] + log_k + v[None, :]).exp()
    choice = torch.multinomial(plan.flatten(), n, replacement=True)
    return x0[choice // n], choice % n


model = VelocityUNet().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.0, foreach=True)
for _ in range(6):
    x1 = torch.rand(256, 3, 32, 32, device=dev) * 2 - 1
    y = torch.randint(0, NCLS, (256,), device=dev)
    x0 = torch.randn_like(x1)
    x0, j = sinkhorn_pairs(x0, x1)
    x1, y = x1[j], y[j]
    y = torch.where(torch.rand(256, device=dev) < 0.1, torch.full_like(y, NCLS), y)
    t = torch.rand(256, device=dev)
    xt = (1 - t)[:, None, None, None] * x0 + t[:, None, None, None] * x1 + 0.01 * torch.randn_like(x0)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        v = model(xt, t, y)
        loss = F.mse_loss(v.float(), x1 - x0)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("ot-cfm loss", round(loss.item(), 4))
report("ot_cfm_sinkhorn_coupling_bf16_adamw")

del loss, v, xt, x0, x1
model.eval()


def ode_sample(net, z, y, steps=20, cfg=2.0):
    x = z
    null = torch.full_like(y, NCLS)
    dt = 1.0 / steps

    def vel(x, t):
        tt = torch.full((x.shape[0] * 2,), t, device=dev)
        vc, vu = net(torch.cat([x, x]), tt, torch.cat([y, null])).float().chunk(2)
        return vu + cfg * (vc - vu)

    for i in range(steps):
        t = i * dt
        with torch.autocast("cuda", dtype=torch.bfloat16):
            mid = x + 0.5 * dt * vel(x, t)
            x = x + dt * vel(mid, t + 0.5 * dt)
    return x


with torch.no_grad():
    labels = torch.arange(NCLS, device=dev).repeat_interleave(10)
    samples = ode_sample(model, torch.randn(100, 3, 32, 32, device=dev), labels).clamp(-1, 1)
print("midpoint cfg samples", tuple(samples.shape), round(samples.mean().item(), 4))
report("midpoint_ode_cfg_100_samples")

del samples
vgg = torchvision.models.vgg16(weights=None).features[:23].to(dev).eval().requires_grad_(False)
taps = {3, 8, 15, 22}
mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1)


def vgg_feats(x):
    x = F.interpolate((x + 1) / 2, size=(64, 64), mode="bilinear", align_corners=False)
    x = (x - mean) / std
    out = []
    for i, layer in enumerate(vgg):
        x = layer(x)
        if i in taps:
            out.append(x)
    return out


student = copy.deepcopy(model).train()
sopt = torch.optim.Adam(student.parameters(), lr=1e-4)
for _ in range(4):
    z = torch.randn(64, 3, 32, 32, device=dev)
    y = torch.randint(0, NCLS, (64,), device=dev)
    with torch.no_grad():
        target = ode_sample(model, z, y).clamp(-1, 1)
        tf = vgg_feats(target)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        pred = z + student(z, torch.zeros(64, device=dev), y).float()
    sf = vgg_feats(pred)
    loss = F.mse_loss(pred, target) + sum(F.mse_loss(a, b) for a, b in zip(sf, tf, strict=True))
    sopt.zero_grad(set_to_none=True)
    loss.backward()
    sopt.step()
print("distill loss", round(loss.item(), 4))
report("one_step_distillation_frozen_vgg16_perceptual")

del loss, pred, sf, tf, target
student.eval()
out = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(4):
        z = torch.randn(250, 3, 32, 32, device=dev)
        y = torch.randint(0, NCLS, (250,), device=dev)
        x = (z + student(z, torch.zeros(250, device=dev), y).float()).clamp(-1, 1)
        out.append(((x + 1) * 127.5).round().to(torch.uint8))
    imgs = torch.cat(out)
print("one-step samples", tuple(imgs.shape))
report("inference_mode_1000_one_step_samples")
