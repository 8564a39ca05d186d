"""SimpleBaseline (Xiao et al. 2018) with integral pose regression (Sun et al. 2018): a torchvision ResNet-50
(random init) without its pooling and classifier, three ConvTranspose2d(kernel 4, stride 2, padding 1)
+ BN + ReLU deconvolution layers of 256 channels and a 1x1 conv to 17 heatmaps at 1/4 of the 256 x 192
input. The heatmaps are turned into coordinates by soft-argmax: a softmax over each flattened heatmap (with
a temperature), the expectation of x and y coordinate grids; the loss is a visibility-weighted L1 on the
coordinates plus an OKS-style loss 1 - exp(-d^2 / (2 s^2 k^2)) with COCO's per-joint sigmas.

Phases: 3 steps at batch 64 under fp16 autocast with a GradScaler and Adam; inference_mode evaluation at
batch 128 with flip test in coordinate space (x mirrored, left/right joints swapped, averaged); a second head
of ConvTranspose2d(kernel 3, stride 2, padding 1, output_padding 1) layers trained 3 steps in fp32 with SGD
momentum while the backbone runs through torch.utils.checkpoint.checkpoint_sequential in 4 segments
(non-reentrant); then empty_cache() and a final inference pass at batch 32 in fp16 weights. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint_sequential

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2202)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, CKPT_BATCH = (2, 2, 2) if SMALL else (64, 128, 96)
RES = (64, 48) if SMALL else (256, 192)
JOINTS = 17
SIGMAS = [0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072, 0.062, 0.062,
          0.107, 0.107, 0.087, 0.087, 0.089, 0.089]
FLIP_INDEX = [0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def deconv_head(kernel, padding, output_padding):
    layers = []
    cin = 2048
    for _ in range(3):
        layers += [
            nn.ConvTranspose2d(cin, 256, kernel, 2, padding, output_padding, bias=False),
            nn.BatchNorm2d(256),
            nn.ReLU(inplace=True),
        ]
        cin = 256
    layers.append(nn.Conv2d(256, JOINTS, 1))
    return nn.Sequential(*layers)


class SoftArgmax(nn.Module):
    def __init__(self, beta=1.0):
        super().__init__()
        self.beta = beta

    def forward(self, heat):
        n, k, h, w = heat.shape
        prob = F.softmax(heat.reshape(n, k, -1).float() * self.beta, dim=-1).reshape(n, k, h, w)
        xs = torch.arange(w, device=heat.device, dtype=prob.dtype)
        ys = torch.arange(h, device=heat.device, dtype=prob.dtype)
        x = (prob.sum(2) * xs).sum(-1)
        y = (prob.sum(3) * ys).sum(-1)
        return torch.stack([x, y], -1)


resnet = torchvision.models.resnet50(weights=None)
stem = nn.Sequential(resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool)
backbone = nn.Sequential(stem, resnet.layer1, resnet.layer2, resnet.layer3, resnet.layer4).to(device)
del resnet
head = deconv_head(4, 1, 0).to(device)
soft_argmax = SoftArgmax(beta=2.0)
sigmas = torch.tensor(SIGMAS, device=device)
H, W = RES[0] // 4, RES[1] // 4


def batch(n):
    x = torch.randn(n, 3, *RES, device=device)
    coords = torch.rand(n, JOINTS, 2, device=device) * torch.tensor([W - 1, H - 1], device=device)
    vis = (torch.rand(n, JOINTS, device=device) > 0.25).float()
    area = torch.rand(n, device=device) * (H * W) + 16.0
    return x, coords, vis, area


def pose_loss(pred, coords, vis, area):
    l1 = (F.l1_loss(pred, coords, reduction="none").sum(-1) * vis).sum() / vis.sum().clamp(min=1)
    d2 = (pred - coords).pow(2).sum(-1)
    oks = torch.exp(-d2 / (2 * area[:, None] * (2 * sigmas) ** 2))
    oks_loss = ((1 - oks) * vis).sum() / vis.sum().clamp(min=1)
    return l1 + oks_loss, oks


params = list(backbone.parameters()) + list(head.parameters())
opt = torch.optim.Adam(params, lr=1e-3)
scaler = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=device == "cuda")
for it in range(3):
    x, coords, vis, area = batch(BATCH)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        heat = head(backbone(x))
    loss, oks = pose_loss(soft_argmax(heat), coords, vis, area)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print(f"fp16 loss {loss.item():.4f} oks {oks.mean().item():.4f} scale {scaler.get_scale():.0f}")
report("simplebaseline fp16 gradscaler adam")

backbone.eval()
head.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    x, coords, vis, area = batch(EVAL_BATCH)
    pred = soft_argmax(head(backbone(x)))
    pred_f = soft_argmax(head(backbone(x.flip(3))))[:, FLIP_INDEX]
    pred_f[..., 0] = (W - 1) - pred_f[..., 0]
    pred = (pred + pred_f) / 2
    _, oks = pose_loss(pred, coords, vis, area)
print(f"flip eval oks {oks.mean().item():.4f}")
report("inference_mode flip eval")

backbone.train()
head2 = deconv_head(3, 1, 1).to(device)
del head, opt, scaler
opt = torch.optim.SGD(list(backbone.parameters()) + list(head2.parameters()), lr=1e-3, momentum=0.9)
for it in range(3):
    x, coords, vis, area = batch(CKPT_BATCH)
    x.requires_grad_(True)
    feats = checkpoint_sequential(backbone, 4, x, use_reentrant=False)
    loss, oks = pose_loss(soft_argmax(head2(feats)), coords, vis, area)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del feats
print(f"checkpointed fp32 loss {loss.item():.4f}")
report("output_padding head checkpoint_sequential sgd fp32")

del opt, x
if device == "cuda":
    torch.cuda.empty_cache()
backbone.eval().half()
head2.eval().half()
with torch.no_grad():
    x = torch.randn(32, 3, *RES, device=device, dtype=torch.float16)
    pred = soft_argmax(head2(backbone(x)))
print(f"fp16 inference mean coord {pred.float().mean().item():.3f}")
report("empty_cache fp16 inference")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
