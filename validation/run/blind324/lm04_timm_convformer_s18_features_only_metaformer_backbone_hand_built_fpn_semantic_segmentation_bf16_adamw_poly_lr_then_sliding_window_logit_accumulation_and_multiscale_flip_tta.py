"""Semantic segmentation on timm's ConvFormer-S18 (MetaFormer with separable-convolution token mixers,
StarReLU) used as a ``features_only=True`` backbone returning four strides (4, 8, 16, 32), under a
by-hand FPN: 1x1 lateral convolutions, nearest upsampling added top-down, 3x3 output convolutions,
all levels bilinearly resized to stride 4, concatenated and fused into 19-class logits; trained with
cross-entropy (ignore_index 255) plus a soft Dice term, bf16 autocast, AdamW with a polynomial LR.

Phases: 0 model and optimizer; 1 three training steps of batch 8 at 512 x 512 crops; 2 sliding-window
inference over one 1024 x 2048 image with 512 windows at stride 384, logits summed into a full-size
accumulator with a count map and divided; 3 multi-scale test-time augmentation of a batch of 2 at
512 x 1024 (scales 0.75, 1.0, 1.25, each also horizontally flipped), softmax averaged and argmax."""

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3244)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 19


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class FPNSeg(nn.Module):
    def __init__(self, dim=128):
        super().__init__()
        self.backbone = timm.create_model(
            "convformer_s18",
            pretrained=False,
            features_only=True,
            out_indices=(0, 1, 2, 3),
            drop_path_rate=0.1,
        )
        chs = self.backbone.feature_info.channels()
        self.lateral = nn.ModuleList(nn.Conv2d(c, dim, 1) for c in chs)
        self.output = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(dim, dim, 3, padding=1, bias=False), nn.BatchNorm2d(dim), nn.ReLU(inplace=True)
            )
            for _ in chs
        )
        self.fuse = nn.Sequential(
            nn.Conv2d(dim * len(chs), dim, 3, padding=1, bias=False),
            nn.BatchNorm2d(dim),
            nn.ReLU(inplace=True),
        )
        self.classifier = nn.Conv2d(dim, NUM_CLASSES, 1)

    def forward(self, x):
        feats = self.backbone(x)
        lat = [conv(f) for conv, f in zip(self.lateral, feats, strict=True)]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], size=lat[i - 1].shape[-2:], mode="nearest")
        outs = [o(p) for o, p in zip(self.output, lat, strict=True)]
        size = outs[0].shape[-2:]
        outs = [outs[0]] + [
            F.interpolate(o, size=size, mode="bilinear", align_corners=False) for o in outs[1:]
        ]
        logits = self.classifier(self.fuse(torch.cat(outs, dim=1)))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


def dice_loss(logits, target):
    valid = (target != 255).unsqueeze(1)
    probs = logits.float().softmax(1) * valid
    onehot = F.one_hot(target.clamp(max=NUM_CLASSES - 1), NUM_CLASSES).permute(0, 3, 1, 2) * valid
    inter = (probs * onehot).sum((0, 2, 3))
    denom = probs.sum((0, 2, 3)) + onehot.sum((0, 2, 3))
    return 1 - ((2 * inter + 1) / (denom + 1)).mean()


model = FPNSeg().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.01)
sched = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=100, power=0.9)
report("model")

model.train()
for step in range(3):
    x = torch.randn(8, 3, 512, 512, device=device)
    y = torch.randint(0, NUM_CLASSES, (8, 512, 512), device=device)
    y[:, :32] = 255
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits, y, ignore_index=255) + 0.5 * dice_loss(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f}")
del x, y, logits, loss
report("train")

model.eval()
image = torch.randn(1, 3, 1024, 2048, device=device)
W, S = 512, 384
acc = torch.zeros(1, NUM_CLASSES, 1024, 2048, device=device)
count = torch.zeros(1, 1, 1024, 2048, device=device)
ys = [*range(0, 1024 - W, S), 1024 - W]
xs = [*range(0, 2048 - W, S), 2048 - W]
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for top in ys:
        for left in xs:
            crop = image[..., top : top + W, left : left + W]
            acc[..., top : top + W, left : left + W] += model(crop).float()
            count[..., top : top + W, left : left + W] += 1
seg = (acc / count).argmax(1)
if device == "cuda":
    print(f"sliding windows {len(ys) * len(xs)} classes {seg.unique().numel()}")
del image, acc, count, crop, seg
report("sliding_window")

batch = torch.randn(2, 3, 512, 1024, device=device)
probs = torch.zeros(2, NUM_CLASSES, 512, 1024, device=device)
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    for scale in (0.75, 1.0, 1.25):
        xs_ = F.interpolate(batch, scale_factor=scale, mode="bilinear", align_corners=False)
        for flip in (False, True):
            inp = xs_.flip(-1) if flip else xs_
            out = model(inp)
            if flip:
                out = out.flip(-1)
            out = F.interpolate(out.float(), size=(512, 1024), mode="bilinear", align_corners=False)
            probs += out.softmax(1)
pred = probs.argmax(1)
if device == "cuda":
    print(f"tta pred {tuple(pred.shape)}")
report("multiscale_tta")
