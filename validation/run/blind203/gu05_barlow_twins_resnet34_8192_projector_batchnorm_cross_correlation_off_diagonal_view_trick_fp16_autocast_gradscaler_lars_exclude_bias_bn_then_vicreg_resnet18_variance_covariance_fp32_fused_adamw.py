"""Barlow Twins after facebookresearch/barlowtwins, then VICReg after facebookresearch/vicreg.

Barlow Twins: torchvision resnet34 (weights=None, fc -> Identity, 512-d) and a projector 512 -> 8192 ->
8192 -> 8192 (Linear without bias, BatchNorm1d, ReLU; last Linear alone), the embeddings passed through
BatchNorm1d(8192, affine=False) and the 8192 x 8192 cross-correlation c = bn(z1).T @ bn(z2) / N; loss
sum((diag(c) - 1)^2) + 0.0051 * sum(offdiag(c)^2), the off-diagonal elements taken with the
flatten()[:-1].view(n - 1, n + 1)[:, 1:] trick. Batch 256 images 3 x 128 x 128 drawn on the device,
two views each (flip, brightness, noise). fp16 autocast with torch.amp.GradScaler as in the original
main.py; LARS by hand (momentum 0.9, weight decay 1.5e-6, eta 0.001, biases and BatchNorm parameters
in their own group excluded from weight decay and the trust ratio).

Then the Barlow Twins objects are deleted with gc.collect() and torch.cuda.empty_cache(), and VICReg
trains a fresh resnet18 with an expander 512 -> 8192 -> 8192 -> 8192 (BatchNorm1d + ReLU): invariance
MSE x 25, variance hinge on sqrt(var + 1e-4) x 25, covariance off-diagonal (x.T @ x / (N - 1)) squared
/ 8192 x 1, all in fp32 at batch 256, AdamW(fused=True) lr 1e-3, weight decay 1e-6.

Phases: Barlow Twins' first step; 2 more Barlow Twins steps; VICReg's first step after empty_cache; 2
more VICReg steps. 4 phases."""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2035)
if SMALL:
    B, RES, EMB, STEPS = 8, 32, 256, 1
else:
    B, RES, EMB, STEPS = 256, 128, 8192, 2
LAMBD = 0.0051
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def views(x):
    n = x.shape[0]
    flip = torch.rand(n, 1, 1, 1, device=x.device) < 0.5
    x = torch.where(flip, x.flip(-1), x) * torch.empty(n, 1, 1, 1, device=x.device).uniform_(0.6, 1.4)
    return (x + 0.05 * torch.randn_like(x) - 0.45) / 0.25


class BarlowTwins(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.backbone = torchvision.models.resnet34(weights=None)
        self.backbone.fc = nn.Identity()
        layers = []
        for i in range(len(sizes) - 2):
            layers += [nn.Linear(sizes[i], sizes[i + 1], bias=False), nn.BatchNorm1d(sizes[i + 1]), nn.ReLU(inplace=True)]
        layers.append(nn.Linear(sizes[-2], sizes[-1], bias=False))
        self.projector = nn.Sequential(*layers)
        self.bn = nn.BatchNorm1d(sizes[-1], affine=False)

    def forward(self, y1, y2):
        z1 = self.projector(self.backbone(y1))
        z2 = self.projector(self.backbone(y2))
        c = self.bn(z1).T @ self.bn(z2)
        c.div_(y1.shape[0])
        on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
        off_diag = off_diagonal(c).pow_(2).sum()
        return on_diag + LAMBD * off_diag


class LARS(torch.optim.Optimizer):
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001, weight_decay_filter=False, lars_adaptation_filter=False):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta,
                        weight_decay_filter=weight_decay_filter, lars_adaptation_filter=lars_adaptation_filter)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                dp = p.grad
                if dp is None:
                    continue
                if not g["weight_decay_filter"]:
                    dp = dp.add(p, alpha=g["weight_decay"])
                if not g["lars_adaptation_filter"]:
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.0, torch.where(update_norm > 0, (g["eta"] * param_norm / update_norm), one), one)
                    dp = dp.mul(q)
                param_state = self.state[p]
                if "mu" not in param_state:
                    param_state["mu"] = torch.zeros_like(p)
                mu = param_state["mu"]
                mu.mul_(g["momentum"]).add_(dp)
                p.add_(mu, alpha=-g["lr"])


model = BarlowTwins([512, EMB, EMB, EMB]).to(device)
param_weights = [p for p in model.parameters() if p.ndim != 1]
param_biases = [p for p in model.parameters() if p.ndim == 1]
opt = LARS(
    [{"params": param_weights}, {"params": param_biases, "weight_decay_filter": True, "lars_adaptation_filter": True}],
    lr=0.2 * B / 256,
    weight_decay=1.5e-6,
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"barlow twins params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def bt_step():
    model.train()
    x = torch.rand(B, 3, RES, RES, device=device)
    y1, y2 = views(x), views(x)
    opt.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = model(y1, y2)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()


print(f"bt step 0 loss {bt_step():.2f}")
report("barlow first step")
for step in range(STEPS):
    loss = bt_step()
    print(f"bt step {step + 1} loss {loss:.2f} scale {scaler.get_scale()}")
report("barlow train")

del model, opt, scaler, param_weights, param_biases
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()


class VICReg(nn.Module):
    def __init__(self, emb):
        super().__init__()
        self.backbone = torchvision.models.resnet18(weights=None)
        self.backbone.fc = nn.Identity()
        self.projector = nn.Sequential(
            nn.Linear(512, emb), nn.BatchNorm1d(emb), nn.ReLU(True),
            nn.Linear(emb, emb), nn.BatchNorm1d(emb), nn.ReLU(True),
            nn.Linear(emb, emb, bias=False),
        )
        self.num_features = emb

    def forward(self, x, y):
        x = self.projector(self.backbone(x))
        y = self.projector(self.backbone(y))
        repr_loss = F.mse_loss(x, y)
        x = x - x.mean(dim=0)
        y = y - y.mean(dim=0)
        std_x = torch.sqrt(x.var(dim=0) + 0.0001)
        std_y = torch.sqrt(y.var(dim=0) + 0.0001)
        std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2
        n = x.shape[0]
        cov_x = (x.T @ x) / (n - 1)
        cov_y = (y.T @ y) / (n - 1)
        cov_loss = off_diagonal(cov_x).pow_(2).sum().div(self.num_features) + off_diagonal(cov_y).pow_(2).sum().div(self.num_features)
        return 25.0 * repr_loss + 25.0 * std_loss + 1.0 * cov_loss


vic = VICReg(EMB).to(device)
vopt = torch.optim.AdamW(vic.parameters(), lr=1e-3, weight_decay=1e-6, fused=amp)


def vic_step():
    vic.train()
    x = torch.rand(B, 3, RES, RES, device=device)
    loss = vic(views(x), views(x))
    vopt.zero_grad(set_to_none=True)
    loss.backward()
    vopt.step()
    return loss.item()


print(f"vicreg step 0 loss {vic_step():.3f}")
report("vicreg first step")
for step in range(STEPS):
    loss = vic_step()
print(f"vicreg loss {loss:.3f}")
if device == "cuda":
    print(f"vicreg allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
