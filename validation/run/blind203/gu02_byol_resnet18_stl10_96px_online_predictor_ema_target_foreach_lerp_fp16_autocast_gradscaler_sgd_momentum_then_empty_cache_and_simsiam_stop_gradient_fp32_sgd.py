"""BYOL on STL-10-sized images with a torchvision ResNet-18, then SimSiam with a fresh ResNet-18.

BYOL: online network = resnet18 (weights=None, fc -> Identity, 512-d) + projector MLP 512 -> 4096
(BatchNorm1d, ReLU) -> 256 + predictor MLP 256 -> 4096 -> 256; target network = a deepcopy of the
online backbone and projector with requires_grad_(False), updated after every step by an exponential
moving average (tau 0.996) with torch._foreach_lerp_ over the parameters and a copy of the BatchNorm
buffers. Batch 384 images 3 x 96 x 96 drawn on the device, two views each (random horizontal flip,
brightness jitter, Gaussian noise, the batch shifted by one random offset of up to 8 pixels with torch.roll),
symmetric loss 2 - 2 cos(prediction, target projection). fp16 autocast with torch.amp.GradScaler, SGD
momentum 0.9 (weight decay 1.5e-6, lr 0.2), gradients clipped after unscale_.

Then the BYOL objects are deleted, gc.collect() and torch.cuda.empty_cache() are called, and SimSiam
trains a fresh resnet18 with a 3-layer projector 512 -> 2048 -> 2048 -> 2048 (BatchNorm1d) and a
predictor 2048 -> 512 -> 2048, stop-gradient by detach(), negative cosine loss, fp32 at batch 256,
SGD momentum 0.9 (lr 0.05, weight decay 1e-4, predictor at a fixed lr in its own param group).

Phases: BYOL's first step (GradScaler and momentum buffers created); 3 more BYOL steps; SimSiam's
first step after empty_cache; 2 more SimSiam steps. 4 phases."""

import copy
import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2032)
if SMALL:
    B, B2, RES, STEPS = 8, 8, 32, 1
else:
    B, B2, RES, STEPS = 384, 256, 96, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def mlp(d_in, d_hidden, d_out):
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.BatchNorm1d(d_hidden), nn.ReLU(inplace=True), nn.Linear(d_hidden, d_out))


def backbone():
    net = torchvision.models.resnet18(weights=None)
    net.fc = nn.Identity()
    return net


def views(x):
    n = x.shape[0]
    flip = torch.rand(n, 1, 1, 1, device=x.device) < 0.5
    x = torch.where(flip, x.flip(-1), x)
    x = x * torch.empty(n, 1, 1, 1, device=x.device).uniform_(0.7, 1.3)
    x = x + 0.05 * torch.randn_like(x)
    shift = int(torch.randint(-8, 9, (1,)).item())
    x = torch.roll(x, shifts=(shift, -shift), dims=(2, 3))
    return x.clamp(0, 1).sub(0.45).div(0.25)


class BYOLNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = backbone()
        self.projector = mlp(512, 4096, 256)

    def forward(self, x):
        return self.projector(self.backbone(x))


def byol_loss(p, z):
    p = F.normalize(p.float(), dim=-1)
    z = F.normalize(z.float(), dim=-1)
    return (2 - 2 * (p * z).sum(dim=-1)).mean()


online = BYOLNet().to(device)
predictor = mlp(256, 4096, 256).to(device)
target = copy.deepcopy(online).requires_grad_(False)
params = list(online.parameters()) + list(predictor.parameters())
opt = torch.optim.SGD(params, lr=0.2, momentum=0.9, weight_decay=1.5e-6)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
TAU = 0.996


@torch.no_grad()
def update_target():
    torch._foreach_lerp_(list(target.parameters()), list(online.parameters()), 1 - TAU)
    for bt, bo in zip(target.buffers(), online.buffers()):
        bt.copy_(bo)


def byol_step():
    online.train()
    predictor.train()
    x = torch.rand(B, 3, RES, RES, device=device)
    v1, v2 = views(x), views(x)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        p1 = predictor(online(v1))
        p2 = predictor(online(v2))
        with torch.no_grad():
            t1 = target(v1)
            t2 = target(v2)
        loss = byol_loss(p1, t2) + byol_loss(p2, t1)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 5.0)
    scaler.step(opt)
    scaler.update()
    update_target()
    return loss.item()


print(f"byol step 0 loss {byol_step():.4f}")
report("byol first step")
for step in range(STEPS):
    loss = byol_step()
print(f"byol step {STEPS} loss {loss:.4f} scale {scaler.get_scale()}")
report("byol train")

del online, predictor, target, params, opt, scaler
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"after empty_cache reserved {torch.cuda.memory_reserved()}")


class SimSiam(nn.Module):
    def __init__(self, dim=2048, pred_dim=512):
        super().__init__()
        self.encoder = backbone()
        self.projector = nn.Sequential(
            nn.Linear(512, dim, bias=False),
            nn.BatchNorm1d(dim),
            nn.ReLU(inplace=True),
            nn.Linear(dim, dim, bias=False),
            nn.BatchNorm1d(dim),
            nn.ReLU(inplace=True),
            nn.Linear(dim, dim, bias=False),
            nn.BatchNorm1d(dim, affine=False),
        )
        self.predictor = nn.Sequential(
            nn.Linear(dim, pred_dim, bias=False), nn.BatchNorm1d(pred_dim), nn.ReLU(inplace=True), nn.Linear(pred_dim, dim)
        )

    def forward(self, x1, x2):
        z1 = self.projector(self.encoder(x1))
        z2 = self.projector(self.encoder(x2))
        p1 = self.predictor(z1)
        p2 = self.predictor(z2)
        return p1, p2, z1.detach(), z2.detach()


simsiam = SimSiam().to(device)
groups = [
    {"params": list(simsiam.encoder.parameters()) + list(simsiam.projector.parameters()), "fix_lr": False},
    {"params": simsiam.predictor.parameters(), "fix_lr": True},
]
sopt = torch.optim.SGD(groups, lr=0.05 * B2 / 256, momentum=0.9, weight_decay=1e-4)


def simsiam_step():
    simsiam.train()
    x = torch.rand(B2, 3, RES, RES, device=device)
    p1, p2, z1, z2 = simsiam(views(x), views(x))
    loss = -(F.cosine_similarity(p1, z2, dim=-1).mean() + F.cosine_similarity(p2, z1, dim=-1).mean()) * 0.5
    sopt.zero_grad()
    loss.backward()
    sopt.step()
    return loss.item()


print(f"simsiam step 0 loss {simsiam_step():.4f}")
report("simsiam first step")
for step in range(2):
    loss = simsiam_step()
print(f"simsiam loss {loss:.4f}")
if device == "cuda":
    print(f"simsiam allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
