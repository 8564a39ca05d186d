"""BYOL self-supervised pre-training: an online torchvision ConvNeXt-Tiny with a BatchNorm MLP
projector and predictor, and a target network (a deep copy, no gradients) updated as an EMA by
torch._foreach_lerp_; two views per image made on the GPU, each a random crop whose size and corner
come from torch.randint on the GPU (read back with .item()), resized to 160 x 160 by bilinear
interpolation and flipped by a GPU torch.rand draw; symmetric cosine loss under bf16 autocast, a
hand-written LARS (trust ratio per weight, momentum 0.9) on the online net; batch 64 of 224 x 224,
3 steps, then target features of 256 images under inference_mode; 5 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models import convnext_tiny

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9602)
B, BE, R, CROP, PROJ, HIDDEN = (4, 8, 64, 32, 16, 32) if SMALL else (64, 256, 224, 160, 256, 4096)
device = "cuda" if torch.cuda.is_available() else "cpu"


def mlp(d_in):
    return nn.Sequential(
        nn.Linear(d_in, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU(inplace=True), nn.Linear(HIDDEN, PROJ)
    )


class Online(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = convnext_tiny()
        self.backbone.classifier[2] = nn.Identity()
        self.projector = mlp(768)

    def forward(self, x):
        return self.projector(self.backbone(x))


def view(x):
    lo = R // 2
    size = int(torch.randint(lo, R + 1, (1,), device=device).item())
    top = int(torch.randint(0, R - size + 1, (1,), device=device).item())
    left = int(torch.randint(0, R - size + 1, (1,), device=device).item())
    crop = F.interpolate(x[:, :, top : top + size, left : left + size], size=(CROP, CROP), mode="bilinear")
    flip = torch.rand(x.shape[0], device=device) < 0.5
    return torch.where(flip[:, None, None, None], crop.flip(3), crop)


def byol_loss(p, z):
    return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1).mean()


@torch.no_grad()
def lars_step(params, bufs, lr=0.2, wd=1.5e-6, eta=0.001, momentum=0.9):
    for p, buf in zip(params, bufs, strict=True):
        if p.grad is None:
            continue
        g = p.grad
        if p.ndim > 1:
            g = g.add(p, alpha=wd)
            pn, gn = p.norm(), g.norm()
            trust = torch.where((pn > 0) & (gn > 0), eta * pn / gn, torch.ones_like(pn))
            g = g * trust
        buf.mul_(momentum).add_(g)
        p.sub_(buf, alpha=lr)


online = Online().to(device)
predictor = mlp(PROJ).to(device)
target = copy.deepcopy(online).requires_grad_(False)
params = [*online.parameters(), *predictor.parameters()]
bufs = [torch.zeros_like(p) for p in params]
online_p, target_p = list(online.parameters()), list(target.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    images = torch.rand(B, 3, R, R, device=device)
    v1, v2 = view(images), view(images)
    with torch.autocast(device, dtype=torch.bfloat16):
        p1, p2 = predictor(online(v1)), predictor(online(v2))
        with torch.no_grad():
            z1, z2 = target(v1), target(v2)
        loss = byol_loss(p1, z2) + byol_loss(p2, z1)
    loss.backward()
    lars_step(params, bufs)
    for p in params:
        p.grad = None
    with torch.no_grad():
        torch._foreach_lerp_(target_p, online_p, 0.004)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, v1, v2, p1, p2, z1, z2, loss
target.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    feats = target.backbone(torch.rand(BE, 3, R, R, device=device))
    feats = F.normalize(feats.float(), dim=-1)
    sim = feats @ feats.T
if device == "cuda":
    print(
        f"eval {tuple(sim.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
