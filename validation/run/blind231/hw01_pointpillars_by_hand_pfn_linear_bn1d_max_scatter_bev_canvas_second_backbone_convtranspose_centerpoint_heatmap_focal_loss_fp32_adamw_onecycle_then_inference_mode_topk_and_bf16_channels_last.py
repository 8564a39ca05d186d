"""PointPillars (Lang et al. 2019) by hand with a CenterPoint (Yin et al. 2021) anchor-free head.

Pillars are given as dense tensors, as a voxeliser would hand them over: P=12000 pillars per sample,
N=32 points per pillar, 9 decorated features (x, y, z, r, xc, yc, zc, xp, yp), zero-padded. The
pillar feature net is PointNet-style: Linear(9, 64, bias=False) + BatchNorm1d over [B*P, 64, N] +
ReLU, a second PFN layer on the concatenation with the per-pillar max (128 -> 64), max over points.
Pillars are scattered into a 64 x 496 x 432 BEV canvas at fixed random (unique, CPU-drawn) cells with
Tensor.scatter (training) or index_put_ per sample (evaluation). A SECOND-style 2-D backbone (3 blocks
of 4/6/6 conv3x3-BN-ReLU at strides 2/2/2) with ConvTranspose2d upsampling to stride 2 and concat (384
channels), a CenterPoint head (shared conv, heatmap of 3 classes, offset 2, z 1, size 3, rot 2) with the
CornerNet/CenterNet Gaussian focal loss written by hand and an L1 regression on 500 gathered centre
indices per sample.

Phases: 4 fp32 steps of AdamW under OneCycleLR at batch 4; an inference_mode evaluation at batch 8
(sigmoid heatmap, 3x3 max-pool peak keeping, top-100 per sample and gathered boxes); 3 steps under bf16
autocast with the 2-D backbone and head in channels_last at batch 6 with gradient clipping. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2311)
device = "cuda"
P, NPTS, FEAT = 12000, 32, 9
NX, NY = 432, 496
NCLS, K = 3, 500


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class PFNLayer(nn.Module):
    def __init__(self, cin, cout, last):
        super().__init__()
        self.last = last
        self.linear = nn.Linear(cin, cout if last else cout // 2, bias=False)
        self.norm = nn.BatchNorm1d(cout if last else cout // 2, eps=1e-3, momentum=0.01)

    def forward(self, x):  # x [M, N, C]
        x = self.linear(x)
        x = self.norm(x.permute(0, 2, 1).contiguous()).permute(0, 2, 1)
        x = F.relu(x)
        x_max = torch.max(x, dim=1, keepdim=True)[0]
        if self.last:
            return x_max
        return torch.cat([x, x_max.repeat(1, x.shape[1], 1)], dim=2)


class PillarNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.pfn = nn.ModuleList([PFNLayer(FEAT, 64, False), PFNLayer(64, 64, True)])

    def forward(self, pillars, mask):
        x = pillars * mask.unsqueeze(-1)
        for layer in self.pfn:
            x = layer(x)
        return x.squeeze(1)  # [M, 64]


def conv_bn(cin, cout, stride=1):
    return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01),
            nn.ReLU(inplace=True)]


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        cfg = [(64, 64, 4), (64, 128, 6), (128, 256, 6)]
        self.blocks = nn.ModuleList()
        self.deblocks = nn.ModuleList()
        for i, (cin, cout, n) in enumerate(cfg):
            layers = conv_bn(cin, cout, 2)
            for _ in range(n - 1):
                layers += conv_bn(cout, cout)
            self.blocks.append(nn.Sequential(*layers))
            up = 2 ** i
            if up == 1:
                de = nn.Sequential(nn.Conv2d(cout, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(inplace=True))
            else:
                de = nn.Sequential(nn.ConvTranspose2d(cout, 128, up, up, bias=False), nn.BatchNorm2d(128),
                                   nn.ReLU(inplace=True))
            self.deblocks.append(de)

    def forward(self, x):
        ups = []
        for blk, de in zip(self.blocks, self.deblocks):
            x = blk(x)
            ups.append(de(x))
        return torch.cat(ups, dim=1)


class CenterHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Sequential(*conv_bn(384, 64))
        self.heads = nn.ModuleDict()
        for name, c in (("hm", NCLS), ("reg", 2), ("height", 1), ("dim", 3), ("rot", 2)):
            self.heads[name] = nn.Sequential(*conv_bn(64, 64), nn.Conv2d(64, c, 1))
        self.heads["hm"][-1].bias.data.fill_(-2.19)

    def forward(self, x):
        x = self.shared(x)
        return {k: h(x) for k, h in self.heads.items()}


class PointPillars(nn.Module):
    def __init__(self):
        super().__init__()
        self.vfe = PillarNet()
        self.backbone = Backbone()
        self.head = CenterHead()

    def scatter_train(self, feats, cells, bsz):
        # feats [B*P, 64] -> canvas [B, 64, NY*NX] by Tensor.scatter at fixed cells
        f = feats.view(bsz, P, 64).transpose(1, 2)
        canvas = torch.zeros(bsz, 64, NY * NX, device=feats.device, dtype=feats.dtype)
        canvas = canvas.scatter(2, cells.unsqueeze(1).expand(-1, 64, -1), f)
        return canvas.view(bsz, 64, NY, NX)

    def scatter_eval(self, feats, cells, bsz):
        canvas = torch.zeros(bsz, 64, NY * NX, device=feats.device, dtype=feats.dtype)
        f = feats.view(bsz, P, 64)
        for b in range(bsz):
            canvas[b].index_put_((torch.arange(64, device=feats.device)[:, None], cells[b][None, :]), f[b].t())
        return canvas.view(bsz, 64, NY, NX)

    def forward(self, pillars, mask, cells, train=True, channels_last=False):
        bsz = pillars.shape[0]
        feats = self.vfe(pillars.flatten(0, 1), mask.flatten(0, 1))
        canvas = self.scatter_train(feats, cells, bsz) if train else self.scatter_eval(feats, cells, bsz)
        if channels_last:
            canvas = canvas.contiguous(memory_format=torch.channels_last)
        return self.head(self.backbone(canvas))


def gaussian_focal_loss(pred_logits, target):
    pred = torch.sigmoid(pred_logits.float()).clamp(1e-4, 1 - 1e-4)
    pos = target.eq(1).float()
    neg = 1 - pos
    neg_w = torch.pow(1 - target, 4)
    pos_loss = torch.log(pred) * torch.pow(1 - pred, 2) * pos
    neg_loss = torch.log(1 - pred) * torch.pow(pred, 2) * neg_w * neg
    num_pos = pos.sum().clamp(min=1)
    return -(pos_loss.sum() + neg_loss.sum()) / num_pos


def make_batch(bsz):
    pillars = torch.randn(bsz, P, NPTS, FEAT, device=device)
    npts = torch.randint(1, NPTS + 1, (bsz, P), device=device)
    mask = (torch.arange(NPTS, device=device)[None, None, :] < npts[..., None]).float()
    cells = torch.stack([torch.randperm(NY * NX)[:P] for _ in range(bsz)]).to(device)
    return pillars, mask, cells


def make_targets(bsz):
    h, w = NY // 2, NX // 2
    hm = torch.rand(bsz, NCLS, h, w, device=device).pow_(8)
    ind = torch.stack([torch.randperm(h * w)[:K] for _ in range(bsz)]).to(device)
    cls = torch.randint(0, NCLS, (bsz, K), device=device)
    hm.view(bsz, NCLS, -1).scatter_(2, (cls * 0).unsqueeze(1).expand(-1, NCLS, -1) + ind.unsqueeze(1), 0.5)
    flat = hm.view(bsz, NCLS, -1)
    flat[torch.arange(bsz, device=device)[:, None], cls, ind] = 1.0
    box = torch.randn(bsz, K, 8, device=device)
    return hm, ind, box


def loss_fn(out, hm, ind, box):
    l_hm = gaussian_focal_loss(out["hm"], hm)
    reg = torch.cat([out["reg"], out["height"], out["dim"], out["rot"]], dim=1)
    bsz = reg.shape[0]
    reg = reg.flatten(2).float()  # [B, 8, H*W]
    pred = reg.gather(2, ind.unsqueeze(1).expand(-1, 8, -1)).transpose(1, 2)
    l_box = F.l1_loss(pred, box, reduction="sum") / (bsz * K)
    return l_hm + 0.25 * l_box


model = PointPillars().to(device)
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=7, pct_start=0.4)
B = 4
for step in range(4):
    pillars, mask, cells = make_batch(B)
    hm, ind, box = make_targets(B)
    out = model(pillars, mask, cells)
    loss = loss_fn(out, hm, ind, box)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    print(f"fp32 step {step} loss {loss.item():.4f}")
del out, loss, pillars, mask, cells, hm, ind, box
report("train fp32")

model.eval()
with torch.inference_mode():
    pillars, mask, cells = make_batch(8)
    out = model(pillars, mask, cells, train=False)
    heat = torch.sigmoid(out["hm"])
    hmax = F.max_pool2d(heat, 3, 1, 1)
    heat = heat * (hmax == heat).float()
    scores, inds = heat.flatten(1).topk(100)
    cls_ids = inds // (heat.shape[2] * heat.shape[3])
    pix = inds % (heat.shape[2] * heat.shape[3])
    reg = torch.cat([out["reg"], out["height"], out["dim"], out["rot"]], dim=1).flatten(2)
    boxes = reg.gather(2, pix.unsqueeze(1).expand(-1, 8, -1)).transpose(1, 2)
    print("eval boxes", tuple(boxes.shape), scores.mean().item())
del out, heat, hmax, scores, inds, cls_ids, pix, reg, boxes, pillars, mask, cells
report("eval inference_mode")

model.train()
model.backbone.to(memory_format=torch.channels_last)
model.head.to(memory_format=torch.channels_last)
B = 6
for step in range(3):
    pillars, mask, cells = make_batch(B)
    hm, ind, box = make_targets(B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(pillars, mask, cells, channels_last=True)
        loss = loss_fn(out, hm, ind, box)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    opt.step()
    print(f"bf16 step {step} loss {loss.item():.4f}")
report("train bf16 channels_last")
