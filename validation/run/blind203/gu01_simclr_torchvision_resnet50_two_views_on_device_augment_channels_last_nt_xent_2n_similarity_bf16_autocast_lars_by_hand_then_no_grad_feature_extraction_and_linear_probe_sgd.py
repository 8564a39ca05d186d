"""SimCLR pre-training of a torchvision ResNet-50, then a linear probe on its frozen features.

Model: torchvision resnet50 (weights=None) with fc replaced by nn.Identity, a SimCLR projection head
2048 -> 2048 (BatchNorm1d, ReLU) -> 128 (BatchNorm1d without affine), the whole model channels_last.
Data: a uint8 batch of 128 images 3 x 224 x 224 made on the host and copied to the device, turned into
two augmented views on the device (one random crop window per view resized to 160 x 160 with
F.interpolate, per-sample horizontal flip, brightness/contrast jitter, 20 % grayscale, normalisation).
Loss: NT-Xent at temperature 0.2 over the 2N x 2N cosine-similarity matrix (diagonal filled with -inf,
positives at i +/- N), computed in fp32 from the bf16 projections. Forward under bf16 autocast;
optimizer LARS written by hand (momentum 0.9, weight decay 1e-6 and trust ratio on weight matrices
and kernels only, eta 0.001), lr 0.3 * 256 / 256.

Phases: the first step (LARS momentum buffers created); 2 more steps; feature extraction of 1,024
images at 160 x 160 under no_grad in chunks of 256 (eval mode, the backbone's 2048-d features kept on
the device); 20 full-batch steps of a linear classifier 2048 -> 1000 on those features (SGD momentum
0.9, lr 0.1). 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2031)
if SMALL:
    N, SRC, RES, STEPS, PROBE_N, CHUNK, PROBE_STEPS = 8, 64, 48, 1, 32, 16, 2
else:
    N, SRC, RES, STEPS, PROBE_N, CHUNK, PROBE_STEPS = 128, 224, 160, 2, 1024, 256, 20
TEMP = 0.2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
MEAN = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
GRAY = torch.tensor([0.299, 0.587, 0.114], device=device).view(1, 3, 1, 1)


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class SimCLR(nn.Module):
    def __init__(self, proj_dim=128):
        super().__init__()
        self.backbone = torchvision.models.resnet50(weights=None)
        feat = self.backbone.fc.in_features
        self.backbone.fc = nn.Identity()
        self.projector = nn.Sequential(
            nn.Linear(feat, 2048, bias=False),
            nn.BatchNorm1d(2048),
            nn.ReLU(inplace=True),
            nn.Linear(2048, proj_dim, bias=False),
            nn.BatchNorm1d(proj_dim, affine=False),
        )

    def forward(self, x):
        return self.projector(self.backbone(x))


class LARS(torch.optim.Optimizer):
    def __init__(self, params, lr, weight_decay=1e-6, momentum=0.9, eta=0.001):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                dp = p.grad
                if p.ndim > 1:
                    dp = dp.add(p, alpha=g["weight_decay"])
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(
                        param_norm > 0.0,
                        torch.where(update_norm > 0, (g["eta"] * param_norm / update_norm), one),
                        one,
                    )
                    dp = dp.mul(q)
                state = self.state[p]
                if "mu" not in state:
                    state["mu"] = torch.zeros_like(p)
                mu = state["mu"]
                mu.mul_(g["momentum"]).add_(dp)
                p.add_(mu, alpha=-g["lr"])


def augment(img):
    n, _, h, w = img.shape
    scale = torch.empty(1).uniform_(0.35, 1.0).item()
    side = int(min(h, w) * math.sqrt(scale))
    top = torch.randint(0, h - side + 1, (1,)).item()
    left = torch.randint(0, w - side + 1, (1,)).item()
    out = F.interpolate(img[:, :, top : top + side, left : left + side], size=(RES, RES), mode="bilinear", align_corners=False)
    flip = torch.rand(n, 1, 1, 1, device=img.device) < 0.5
    out = torch.where(flip, out.flip(-1), out)
    bright = torch.empty(n, 1, 1, 1, device=img.device).uniform_(0.6, 1.4)
    contrast = torch.empty(n, 1, 1, 1, device=img.device).uniform_(0.6, 1.4)
    mean = out.mean(dim=(1, 2, 3), keepdim=True)
    out = ((out - mean) * contrast + mean) * bright
    gray = (out * GRAY).sum(1, keepdim=True).expand_as(out)
    to_gray = torch.rand(n, 1, 1, 1, device=img.device) < 0.2
    out = torch.where(to_gray, gray, out).clamp_(0, 1)
    return ((out - MEAN) / STD).contiguous(memory_format=torch.channels_last)


def nt_xent(z1, z2, t=TEMP):
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2]).float(), dim=1)
    sim = z @ z.t() / t
    sim.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, targets)


model = SimCLR().to(device, memory_format=torch.channels_last)
opt = LARS(model.parameters(), lr=0.3 * (2 * N) / 256)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def train_step(raw):
    model.train()
    x = raw.to(device, non_blocking=True).float().div_(255)
    v1, v2 = augment(x), augment(x)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        z = model(torch.cat([v1, v2]))
        loss = nt_xent(*z.chunk(2))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


raw = torch.randint(0, 256, (N, 3, SRC, SRC), dtype=torch.uint8)
print(f"step 0 loss {train_step(raw):.4f}")
report("first step")
for step in range(STEPS):
    raw = torch.randint(0, 256, (N, 3, SRC, SRC), dtype=torch.uint8)
    loss = train_step(raw)
    print(f"step {step + 1} loss {loss:.4f}")
report("train")

model.eval()
feats, labels = [], []
with torch.no_grad():
    for i in range(0, PROBE_N, CHUNK):
        raw = torch.randint(0, 256, (CHUNK, 3, RES, RES), dtype=torch.uint8)
        x = raw.to(device).float().div_(255)
        x = ((x - MEAN) / STD).contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            f = model.backbone(x)
        feats.append(f.float())
        labels.append(torch.randint(0, 1000, (CHUNK,), device=device))
feats = torch.cat(feats)
labels = torch.cat(labels)
print(f"features {tuple(feats.shape)}")
report("features")

probe = nn.Linear(feats.shape[1], 1000).to(device)
probe_opt = torch.optim.SGD(probe.parameters(), lr=0.1, momentum=0.9)
for step in range(PROBE_STEPS):
    loss = F.cross_entropy(probe(feats), labels)
    probe_opt.zero_grad()
    loss.backward()
    probe_opt.step()
acc = (probe(feats).argmax(-1) == labels).float().mean().item()
print(f"probe loss {loss.item():.4f} acc {acc:.4f}")
if device == "cuda":
    print(f"probe allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
