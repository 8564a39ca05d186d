"""RetinaNet (Lin et al. 2017) written by hand: torchvision ResNet-50 (random init) with
torchvision.ops.FrozenBatchNorm2d, an FPN P3-P7 built by hand, 9 anchors per location (3 scales x 3 aspect
ratios) generated in torch, classification and box subnets (4 conv3x3 + ReLU, 256 channels, shared over
levels; prior bias -log(99)).

Matching is dense and fixed in size: torchvision.ops.box_iou between all anchors and T=16 random boxes per
image, max/argmax over targets, IoU >= 0.5 positive, < 0.4 negative, in between ignored (masks, no
indexing); box targets encoded as (dx, dy, dw, dh) with weights (1, 1, 1, 1). Losses: sigmoid focal loss
(alpha 0.25, gamma 2) written by hand over all anchors and classes, smooth L1 (beta 1/9) on positives, both
normalised by the number of positives.

Phases: 3 steps in fp32 at batch 8 on 640 x 640 with layer1..layer4 run through torch.utils.checkpoint
(non-reentrant) and fused AdamW; no_grad evaluation at batch 16 (scores and decoded boxes over all anchors,
top-1000 per image); 3 steps under bf16 autocast with the backbone frozen (requires_grad False, run under
no_grad) at batch 16 with a new fused AdamW over the FPN and heads; torch.cuda.empty_cache() and an
inference_mode pass at batch 4 on 1024 x 1024. 4 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint
from torchvision.ops import box_iou

torch.manual_seed(2245)
device = "cuda"
C, A, T = 80, 9, 16
STRIDES = (8, 16, 32, 64, 128)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def subnet(out):
    layers = []
    for _ in range(4):
        layers += [nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True)]
    layers.append(nn.Conv2d(256, out, 3, padding=1))
    return nn.Sequential(*layers)


class RetinaNet(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet50(weights=None, norm_layer=torchvision.ops.FrozenBatchNorm2d)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.layers = nn.ModuleList([r.layer1, r.layer2, r.layer3, r.layer4])
        self.lat = nn.ModuleList(nn.Conv2d(c, 256, 1) for c in (512, 1024, 2048))
        self.fout = nn.ModuleList(nn.Conv2d(256, 256, 3, padding=1) for _ in range(3))
        self.p6, self.p7 = nn.Conv2d(2048, 256, 3, 2, 1), nn.Conv2d(256, 256, 3, 2, 1)
        self.cls, self.box = subnet(A * C), subnet(A * 4)
        nn.init.constant_(self.cls[-1].bias, -math.log(99))
        self.ckpt = False

    def backbone(self, x):
        x = self.stem(x)
        feats = []
        for layer in self.layers:
            x = checkpoint(layer, x, use_reentrant=False) if self.ckpt else layer(x)
            feats.append(x)
        return feats[1:]

    def heads(self, c3, c4, c5):
        l5 = self.lat[2](c5)
        l4 = self.lat[1](c4) + F.interpolate(l5, size=c4.shape[-2:])
        l3 = self.lat[0](c3) + F.interpolate(l4, size=c3.shape[-2:])
        p6 = self.p6(c5)
        ps = [self.fout[0](l3), self.fout[1](l4), self.fout[2](l5), p6, self.p7(F.relu(p6))]
        b = c3.shape[0]
        cls = torch.cat([self.cls(p).permute(0, 2, 3, 1).reshape(b, -1, C) for p in ps], 1)
        box = torch.cat([self.box(p).permute(0, 2, 3, 1).reshape(b, -1, 4) for p in ps], 1)
        return cls, box

    def forward(self, x, frozen=False):
        if frozen:
            with torch.no_grad():
                c3, c4, c5 = self.backbone(x)
        else:
            c3, c4, c5 = self.backbone(x)
        return self.heads(c3, c4, c5)


def anchors(res):
    out = []
    for s in STRIDES:
        n = math.ceil(res / s)
        base = []
        for scale in (2 ** 0, 2 ** (1 / 3), 2 ** (2 / 3)):
            for ratio in (0.5, 1.0, 2.0):
                size = 4 * s * scale
                w, h = size / math.sqrt(ratio), size * math.sqrt(ratio)
                base.append([-w / 2, -h / 2, w / 2, h / 2])
        base = torch.tensor(base, device=device)
        c = (torch.arange(n, device=device, dtype=torch.float32) + 0.5) * s
        cy, cx = torch.meshgrid(c, c, indexing="ij")
        ctr = torch.stack([cx, cy, cx, cy], -1).reshape(-1, 1, 4)
        out.append((ctr + base).reshape(-1, 4))
    return torch.cat(out)


def encode(anc, gt):
    aw, ah = anc[..., 2] - anc[..., 0], anc[..., 3] - anc[..., 1]
    ax, ay = anc[..., 0] + aw / 2, anc[..., 1] + ah / 2
    gw, gh = gt[..., 2] - gt[..., 0], gt[..., 3] - gt[..., 1]
    gx, gy = gt[..., 0] + gw / 2, gt[..., 1] + gh / 2
    return torch.stack([(gx - ax) / aw, (gy - ay) / ah, torch.log(gw / aw), torch.log(gh / ah)], -1)


def loss_fn(cls, box, anc, gt, labels):
    b = gt.shape[0]
    iou = torch.stack([box_iou(anc, gt[i]) for i in range(b)])  # [B, N, T]
    best, arg = iou.max(-1)
    pos = best >= 0.5
    valid = pos | (best < 0.4)
    npos = pos.sum().clamp(min=1).float()
    tl = labels.gather(1, arg)
    onehot = F.one_hot(tl, C).float() * pos[..., None]
    p = cls.float().sigmoid()
    ce = F.binary_cross_entropy_with_logits(cls.float(), onehot, reduction="none")
    pt = p * onehot + (1 - p) * (1 - onehot)
    fl = ce * (1 - pt) ** 2 * (0.25 * onehot + 0.75 * (1 - onehot))
    l_cls = (fl * valid[..., None]).sum() / npos
    matched = gt.gather(1, arg[..., None].expand(-1, -1, 4))
    tgt = encode(anc.expand(b, -1, -1), matched)
    l_box = (F.smooth_l1_loss(box.float(), tgt, beta=1 / 9, reduction="none").sum(-1) * pos).sum() / npos
    return l_cls + l_box


def batch(b, res):
    xy = torch.rand(b, T, 2, device=device) * res * 0.7
    wh = torch.rand(b, T, 2, device=device) * res * 0.3 + 16
    return (torch.randn(b, 3, res, res, device=device), torch.cat([xy, xy + wh], -1),
            torch.randint(0, C, (b, T), device=device))


model = RetinaNet().to(device)
anc640 = anchors(640)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=1e-4, fused=True)

model.train()
model.ckpt = True
for _ in range(3):
    x, gt, lab = batch(8, 640)
    cls, box = model(x)
    loss = loss_fn(cls, box, anc640, gt, lab)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"fp32 loss {loss.item():.4f}")
del cls, box, loss
report("fp32 checkpointed train")

model.eval()
with torch.no_grad():
    cls, box = model(torch.randn(16, 3, 640, 640, device=device))
    scores = cls.sigmoid().flatten(1)
    top, idx = scores.topk(1000, dim=1)
    aidx = idx // C
    d = box.gather(1, aidx[..., None].expand(-1, -1, 4))
    a = anc640[aidx]
    wa, ha = a[..., 2] - a[..., 0], a[..., 3] - a[..., 1]
    cx, cy = a[..., 0] + wa / 2 + d[..., 0] * wa, a[..., 1] + ha / 2 + d[..., 1] * ha
    w, h = wa * d[..., 2].clamp(max=4.135).exp(), ha * d[..., 3].clamp(max=4.135).exp()
    dets = torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], -1)
print("eval dets", tuple(dets.shape), top.mean().item())
del cls, box, scores, top, idx, d, a, dets
report("no_grad eval")

del opt
for p in model.stem.parameters():
    p.requires_grad_(False)
for p in model.layers.parameters():
    p.requires_grad_(False)
model.ckpt = False
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
for _ in range(3):
    x, gt, lab = batch(16, 640)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        cls, box = model(x, frozen=True)
    loss = loss_fn(cls, box, anc640, gt, lab)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"bf16 frozen loss {loss.item():.4f}")
del cls, box, loss
report("bf16 frozen backbone train")

opt.zero_grad(set_to_none=True)
torch.cuda.empty_cache()
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    cls, box = model(torch.randn(4, 3, 1024, 1024, device=device))
print("inference 1024", tuple(cls.shape))
report("inference 1024")
