"""A YOLO-style one-stage detector by hand in channels_last: a CSP backbone of Conv-BN-SiLU blocks
(C3 modules with bottleneck residuals, width 64..512), an SPPF (three chained 5x5 max-pools), a PAN neck
(nearest upsampling + concatenation, strided convs back down) and three grid heads (strides 8, 16, 32,
3 anchors each, 80 classes + objectness + 4 box numbers per anchor).

Targets are dense and fixed in size: every grid cell holding one of T=12 random box centres gets that box
(the last writer wins, by scatter on a flat index), anchors by fixed priors. Box loss is
torchvision.ops.complete_box_iou_loss (CIoU) on cells with a target, objectness BCE-with-logits against the
detached IoU on all cells, class BCE on positives (masks by multiplication, no indexing).

An EMA copy of the model (torch._foreach_lerp_ over parameters, buffers copied) is kept.
Phases: 4 steps under bf16 autocast with foreach AdamW, batch 32 at 640 x 640; EMA model evaluated under
inference_mode at batch 64 (sigmoid, per-image top-300); multi-scale training in fp16 autocast with a
GradScaler at sizes 512, 640, 768 (batch 24); empty_cache() and the EMA model at 1024 x 1024, batch 8. 4 phases."""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import complete_box_iou_loss

torch.manual_seed(2243)
device = "cuda"
NC, NA, T = 80, 3, 12
ANCHORS = torch.tensor([[[10, 13], [16, 30], [33, 23]], [[30, 61], [62, 45], [59, 119]],
                        [[116, 90], [156, 198], [373, 326]]], dtype=torch.float32)
STRIDES = (8, 16, 32)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Conv(nn.Sequential):
    def __init__(self, a, b, k=1, s=1, p=None):
        super().__init__(nn.Conv2d(a, b, k, s, k // 2 if p is None else p, bias=False), nn.BatchNorm2d(b, eps=1e-3, momentum=0.03),
                         nn.SiLU(inplace=True))


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut=True):
        super().__init__()
        self.cv1, self.cv2, self.add = Conv(c, c, 1), Conv(c, c, 3), shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    def __init__(self, a, b, n=1, shortcut=True):
        super().__init__()
        h = b // 2
        self.cv1, self.cv2, self.cv3 = Conv(a, h), Conv(a, h), Conv(2 * h, b)
        self.m = nn.Sequential(*(Bottleneck(h, shortcut) for _ in range(n)))

    def forward(self, x):
        return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))


class SPPF(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.cv1, self.cv2 = Conv(c, c // 2), Conv(c * 2, c)

    def forward(self, x):
        x = self.cv1(x)
        y1 = F.max_pool2d(x, 5, 1, 2)
        y2 = F.max_pool2d(y1, 5, 1, 2)
        return self.cv2(torch.cat([x, y1, y2, F.max_pool2d(y2, 5, 1, 2)], 1))


class Yolo(nn.Module):
    def __init__(self):
        super().__init__()
        self.b1 = nn.Sequential(Conv(3, 32, 6, 2, 2), Conv(32, 64, 3, 2), C3(64, 64, 1), Conv(64, 128, 3, 2),
                                C3(128, 128, 2))
        self.b2 = nn.Sequential(Conv(128, 256, 3, 2), C3(256, 256, 3))
        self.b3 = nn.Sequential(Conv(256, 512, 3, 2), C3(512, 512, 1), SPPF(512))
        self.lat5, self.c4 = Conv(512, 256), C3(512, 256, 1, False)
        self.lat4, self.c3 = Conv(256, 128), C3(256, 128, 1, False)
        self.down3, self.n4 = Conv(128, 128, 3, 2), C3(256, 256, 1, False)
        self.down4, self.n5 = Conv(256, 256, 3, 2), C3(512, 512, 1, False)
        self.heads = nn.ModuleList(nn.Conv2d(c, NA * (5 + NC), 1) for c in (128, 256, 512))

    def forward(self, x):
        p3 = self.b1(x)
        p4 = self.b2(p3)
        p5 = self.b3(p4)
        l5 = self.lat5(p5)
        h4 = self.c4(torch.cat([F.interpolate(l5, scale_factor=2.0, mode="nearest"), p4], 1))
        l4 = self.lat4(h4)
        o3 = self.c3(torch.cat([F.interpolate(l4, scale_factor=2.0, mode="nearest"), p3], 1))
        o4 = self.n4(torch.cat([self.down3(o3), l4], 1))
        o5 = self.n5(torch.cat([self.down4(o4), l5], 1))
        outs = []
        for h, f in zip(self.heads, (o3, o4, o5)):
            b, _, gy, gx = f.shape
            outs.append(h(f).view(b, NA, 5 + NC, gy, gx).permute(0, 1, 3, 4, 2))
        return outs


def loss_fn(outs, boxes, labels, res):
    # boxes [B, T, 4] cx, cy, w, h in pixels
    total = 0.0
    b = boxes.shape[0]
    for i, (p, s) in enumerate(zip(outs, STRIDES)):
        g = res // s
        p = p.float()
        cell = (boxes[..., 1] / s).long().clamp(0, g - 1) * g + (boxes[..., 0] / s).long().clamp(0, g - 1)
        tmask = torch.zeros(b, g * g, device=device).scatter_(1, cell, 1.0)
        tbox = torch.zeros(b, g * g, 4, device=device).scatter_(1, cell[..., None].expand(-1, -1, 4), boxes)
        tcls = torch.zeros(b, g * g, NC, device=device)
        tcls.scatter_(1, cell[..., None].expand(-1, -1, NC), F.one_hot(labels, NC).float())
        ys, xs = torch.meshgrid(torch.arange(g, device=device), torch.arange(g, device=device), indexing="ij")
        grid = torch.stack([xs, ys], -1).view(1, 1, g * g, 2).float()
        pp = p.reshape(b, NA, g * g, 5 + NC)
        xy = (pp[..., :2].sigmoid() * 2 - 0.5 + grid) * s
        wh = (pp[..., 2:4].sigmoid() * 2) ** 2 * ANCHORS[i].to(device).view(1, NA, 1, 2)
        pred = torch.cat([xy - wh / 2, xy + wh / 2], -1)
        tb = tbox[:, None].expand(-1, NA, -1, -1)
        tgt = torch.cat([tb[..., :2] - tb[..., 2:] / 2, tb[..., :2] + tb[..., 2:] / 2], -1)
        m = tmask[:, None].expand(-1, NA, -1)
        ciou = complete_box_iou_loss(pred, tgt, reduction="none")
        l_box = (ciou * m).sum() / m.sum().clamp(min=1)
        iou = (1 - ciou).detach().clamp(min=0) * m
        l_obj = F.binary_cross_entropy_with_logits(pp[..., 4], iou)
        l_cls = (F.binary_cross_entropy_with_logits(pp[..., 5:], tcls[:, None].expand(-1, NA, -1, -1),
                                                    reduction="none").mean(-1) * m).sum() / m.sum().clamp(min=1)
        total = total + 0.05 * l_box + l_obj * (4.0, 1.0, 0.4)[i] + 0.5 * l_cls
    return total * b


def batch(b, res):
    x = torch.rand(b, 3, res, res, device=device).contiguous(memory_format=torch.channels_last)
    cxcy = torch.rand(b, T, 2, device=device) * res
    wh = torch.rand(b, T, 2, device=device) * res * 0.4 + 8
    return x, torch.cat([cxcy, wh], -1), torch.randint(0, NC, (b, T), device=device)


model = Yolo().to(device).to(memory_format=torch.channels_last)
ema = copy.deepcopy(model).eval()
for p in ema.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4, foreach=True)
ema_params, model_params = list(ema.parameters()), list(model.parameters())


def ema_update(decay=0.9999):
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, model_params, 1 - decay)
        for be, bm in zip(ema.buffers(), model.buffers()):
            be.copy_(bm)


def train_step(res, b, dtype, scaler=None):
    x, boxes, labels = batch(b, res)
    with torch.autocast("cuda", dtype=dtype):
        outs = model(x)
    loss = loss_fn(outs, boxes, labels, res)
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        scaler.step(opt)
        scaler.update()
    ema_update()
    print(f"res {res} loss {loss.item():.3f}")


model.train()
for _ in range(4):
    train_step(640, 32, torch.bfloat16)
report("bf16 train 640")


def infer(b, res):
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
        outs = ema(torch.rand(b, 3, res, res, device=device).contiguous(memory_format=torch.channels_last))
        flat = torch.cat([o.reshape(b, -1, 5 + NC) for o in outs], 1).float()
        conf = flat[..., 4:5].sigmoid() * flat[..., 5:].sigmoid()
        top, idx = conf.flatten(1).topk(300, dim=1)
    return top


top = infer(64, 640)
print("ema top mean", top.mean().item())
del top
report("ema inference 640")

scaler = torch.amp.GradScaler("cuda")
for res in (512, 640, 768):
    train_step(res, 24, torch.float16, scaler)
report("fp16 multiscale")

opt.zero_grad(set_to_none=True)
torch.cuda.empty_cache()
top = infer(8, 1024)
print("ema 1024", top.shape)
report("ema inference 1024")
