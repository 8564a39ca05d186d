"""A YOLOv5s-style detector written by hand after Ultralytics' yolov5 (models/common.py, utils/loss.py):
a CSPDarknet backbone (Conv-BN-SiLU, C3 blocks of depth 1/2/3/1 at width 0.5, SPPF), a PANet neck and
a 3-anchor Detect head over 80 classes at strides 8/16/32; YOLOv5's ComputeLoss with build_targets
(anchor-ratio matching, the two neighbouring cells as extra positives), CIoU box loss and BCE
objectness and class losses; a mosaic-like batch of 32 images at 640 x 640 tiled from four 320 x 320
torch.randn quadrants with 6 boxes per quadrant; fp16 autocast with GradScaler, SGD (Nesterov,
momentum 0.937, three parameter groups) and YOLOv5's ModelEMA, 3 steps; then the EMA model in half
precision decoding its predictions for 32 images under no_grad; 5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12001)
B, IMG, STEPS = (2, 128, 2) if SMALL else (32, 640, 3)
NC, NB = 80, 6
device = "cuda" if torch.cuda.is_available() else "cpu"
ANCHORS = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]


class Conv(nn.Module):
    def __init__(self, c1, c2, k=1, s=1, p=None):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2 if p is None else p, bias=False)
        self.bn = nn.BatchNorm2d(c2, eps=0.001, momentum=0.03)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c1, c2, shortcut=True):
        super().__init__()
        self.cv1, self.cv2 = Conv(c1, c2, 1), Conv(c2, c2, 3)
        self.add = shortcut and c1 == c2

    def forward(self, x):
        return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))


class C3(nn.Module):
    def __init__(self, c1, c2, n=1, shortcut=True):
        super().__init__()
        c_ = c2 // 2
        self.cv1, self.cv2, self.cv3 = Conv(c1, c_), Conv(c1, c_), Conv(2 * c_, c2)
        self.m = nn.Sequential(*(Bottleneck(c_, c_, shortcut) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class SPPF(nn.Module):
    def __init__(self, c1, c2, k=5):
        super().__init__()
        c_ = c1 // 2
        self.cv1, self.cv2 = Conv(c1, c_), Conv(c_ * 4, c2)
        self.m = nn.MaxPool2d(k, 1, k // 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class Detect(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.no, self.nl, self.na = NC + 5, 3, 3
        self.stride = torch.tensor([8.0, 16.0, 32.0])
        a = torch.tensor(ANCHORS).float().view(3, -1, 2)
        self.register_buffer("anchors", a / self.stride.view(-1, 1, 1))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)
        for mi, s in zip(self.m, self.stride, strict=True):
            b = mi.bias.view(self.na, -1)
            b.data[:, 4] += math.log(8 / (640 / s) ** 2)
            b.data[:, 5:] += math.log(0.6 / (NC - 0.99999))

    def forward(self, xs):
        out, z = [], []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            x = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            out.append(x)
            if not self.training:
                yv, xv = torch.meshgrid(
                    torch.arange(ny, device=x.device), torch.arange(nx, device=x.device), indexing="ij"
                )
                grid = torch.stack((xv, yv), 2).expand(1, self.na, ny, nx, 2).to(x.dtype) - 0.5
                ag = (
                    (self.anchors[i] * self.stride[i])
                    .view(1, self.na, 1, 1, 2)
                    .expand(1, self.na, ny, nx, 2)
                    .to(x.dtype)
                )
                xy, wh, conf = x.sigmoid().split((2, 2, self.no - 4), 4)
                xy = (xy * 2 + grid) * self.stride[i]
                wh = (wh * 2) ** 2 * ag
                z.append(torch.cat((xy, wh, conf), 4).view(bs, -1, self.no))
        return out if self.training else torch.cat(z, 1)


class YOLOv5s(nn.Module):
    def __init__(self):
        super().__init__()
        self.b0, self.b1, self.b2 = Conv(3, 32, 6, 2, 2), Conv(32, 64, 3, 2), C3(64, 64, 1)
        self.b3, self.b4 = Conv(64, 128, 3, 2), C3(128, 128, 2)
        self.b5, self.b6 = Conv(128, 256, 3, 2), C3(256, 256, 3)
        self.b7, self.b8, self.b9 = Conv(256, 512, 3, 2), C3(512, 512, 1), SPPF(512, 512)
        self.h10, self.h13 = Conv(512, 256), C3(512, 256, 1, False)
        self.h14, self.h17 = Conv(256, 128), C3(256, 128, 1, False)
        self.h18, self.h20 = Conv(128, 128, 3, 2), C3(256, 256, 1, False)
        self.h21, self.h23 = Conv(256, 256, 3, 2), C3(512, 512, 1, False)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.detect = Detect((128, 256, 512))

    def forward(self, x):
        p4 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p6 = self.b6(self.b5(p4))
        p9 = self.b9(self.b8(self.b7(p6)))
        h10 = self.h10(p9)
        h14 = self.h14(self.h13(torch.cat((self.up(h10), p6), 1)))
        out3 = self.h17(torch.cat((self.up(h14), p4), 1))
        out4 = self.h20(torch.cat((self.h18(out3), h14), 1))
        out5 = self.h23(torch.cat((self.h21(out4), h10), 1))
        return self.detect([out3, out4, out5])


def bbox_ciou(box1, box2, eps=1e-7):
    (x1, y1, w1, h1), (x2, y2, w2, h2) = box1.chunk(4, -1), box2.chunk(4, -1)
    w1_, h1_, w2_, h2_ = w1 / 2, h1 / 2, w2 / 2, h2 / 2
    b1_x1, b1_x2, b1_y1, b1_y2 = x1 - w1_, x1 + w1_, y1 - h1_, y1 + h1_
    b2_x1, b2_x2, b2_y1, b2_y2 = x2 - w2_, x2 + w2_, y2 - h2_, y2 + h2_
    inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp(0) * (
        b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)
    ).clamp(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)
    ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)
    c2 = cw**2 + ch**2 + eps
    rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2) ** 2 + (b2_y1 + b2_y2 - b1_y1 - b1_y2) ** 2) / 4
    v = (4 / math.pi**2) * (torch.atan(w2 / h2) - torch.atan(w1 / h1)).pow(2)
    with torch.no_grad():
        alpha = v / (v - iou + (1 + eps))
    return iou - (rho2 / c2 + v * alpha)


class ComputeLoss:
    def __init__(self, model):
        self.bce_cls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0], device=device))
        self.bce_obj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0], device=device))
        self.balance = [4.0, 1.0, 0.4]
        self.anchors = model.detect.anchors
        self.na, self.nl = 3, 3

    def build_targets(self, p, targets):
        na, nt = self.na, targets.shape[0]
        tcls, tbox, indices, anch = [], [], [], []
        gain = torch.ones(7, device=device)
        ai = torch.arange(na, device=device).float().view(na, 1).repeat(1, nt)
        targets = torch.cat((targets.repeat(na, 1, 1), ai[..., None]), 2)
        g = 0.5
        off = torch.tensor([[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]], device=device).float() * g
        for i in range(self.nl):
            anchors, shape = self.anchors[i], p[i].shape
            gain[2:6] = torch.tensor(shape)[[3, 2, 3, 2]]
            t = targets * gain
            r = t[..., 4:6] / anchors[:, None]
            j = torch.max(r, 1 / r).max(2)[0] < 4.0
            t = t[j]
            gxy = t[:, 2:4]
            gxi = gain[[2, 3]] - gxy
            j, k = ((gxy % 1 < g) & (gxy > 1)).T
            lo, m = ((gxi % 1 < g) & (gxi > 1)).T
            j = torch.stack((torch.ones_like(j), j, k, lo, m))
            t = t.repeat((5, 1, 1))[j]
            offsets = (torch.zeros_like(gxy)[None] + off[:, None])[j]
            bc, gxy, gwh, a = t.chunk(4, 1)
            a, (b, c) = a.long().view(-1), bc.long().T
            gij = (gxy - offsets).long()
            gi, gj = gij.T
            gi, gj = gi.clamp_(0, shape[3] - 1), gj.clamp_(0, shape[2] - 1)
            indices.append((b, a, gj, gi))
            tbox.append(torch.cat((gxy - gij, gwh), 1))
            anch.append(anchors[a])
            tcls.append(c)
        return tcls, tbox, indices, anch

    def __call__(self, p, targets):
        lcls, lbox, lobj = (torch.zeros(1, device=device) for _ in range(3))
        tcls, tbox, indices, anch = self.build_targets(p, targets)
        for i, pi in enumerate(p):
            b, a, gj, gi = indices[i]
            tobj = torch.zeros(pi.shape[:4], dtype=pi.dtype, device=device)
            n = b.shape[0]
            if n:
                pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, NC), 1)
                pxy = pxy.sigmoid() * 2 - 0.5
                pwh = (pwh.sigmoid() * 2) ** 2 * anch[i]
                iou = bbox_ciou(torch.cat((pxy, pwh), 1), tbox[i]).squeeze()
                lbox += (1.0 - iou).mean()
                tobj[b, a, gj, gi] = iou.detach().clamp(0).type(tobj.dtype)
                t = torch.full_like(pcls, 0.0)
                t[range(n), tcls[i]] = 1.0
                lcls += self.bce_cls(pcls, t)
            lobj += self.bce_obj(pi[..., 4], tobj) * self.balance[i]
        lbox *= 0.05
        lobj *= 1.0 * (IMG / 640) ** 2
        lcls *= 0.5 * NC / 80
        bs = tobj.shape[0]
        return (lbox + lobj + lcls) * bs, torch.cat((lbox, lobj, lcls)).detach()


class ModelEMA:
    def __init__(self, model, decay=0.9999, tau=2000):
        self.ema = copy.deepcopy(model).eval()
        self.updates, self.decay = 0, lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = model.state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v *= d
                v += (1 - d) * msd[k].detach()


def mosaic_batch():
    h = IMG // 2
    quads = [torch.randn(B, 3, h, h, device=device) for _ in range(4)]
    imgs = torch.cat((torch.cat(quads[:2], 3), torch.cat(quads[2:], 3)), 2).clamp_(-3, 3).div_(6).add_(0.5)
    targets = []
    for ox, oy in ((0, 0), (0.5, 0), (0, 0.5), (0.5, 0.5)):
        xy = torch.rand(B, NB, 2, device=device) * 0.4 + 0.05 + torch.tensor([ox, oy], device=device)
        wh = torch.rand(B, NB, 2, device=device) * 0.2 + 0.02
        cls = torch.randint(0, NC, (B, NB, 1), device=device).float()
        img = torch.arange(B, device=device).float().view(B, 1, 1).expand(B, NB, 1)
        targets.append(torch.cat((img, cls, xy, wh), 2).view(-1, 6))
    return imgs, torch.cat(targets, 0)


model = YOLOv5s().to(device)
g_bn, g_w, g_b = [], [], []
for mod in model.modules():
    for name, p in mod.named_parameters(recurse=False):
        if name == "bias":
            g_b.append(p)
        elif isinstance(mod, nn.BatchNorm2d):
            g_bn.append(p)
        else:
            g_w.append(p)
optimizer = torch.optim.SGD(g_b, lr=0.01, momentum=0.937, nesterov=True)
optimizer.add_param_group({"params": g_w, "weight_decay": 5e-4 * B / 64})
optimizer.add_param_group({"params": g_bn, "weight_decay": 0.0})
compute_loss = ComputeLoss(model)
ema = ModelEMA(model)
scaler = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    imgs, targets = mosaic_batch()
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        pred = model(imgs)
        loss, items = compute_loss(pred, targets)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    ema.update(model)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} items {items.tolist()}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del imgs, targets, pred, loss, items

val = ema.ema.half()
with torch.no_grad():
    imgs, _ = mosaic_batch()
    out = val(imgs.half())
    conf = out[..., 4:5] * out[..., 5:].amax(-1, keepdim=True)
if device == "cuda":
    print(
        f"eval {tuple(out.shape)} conf {conf.float().mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
