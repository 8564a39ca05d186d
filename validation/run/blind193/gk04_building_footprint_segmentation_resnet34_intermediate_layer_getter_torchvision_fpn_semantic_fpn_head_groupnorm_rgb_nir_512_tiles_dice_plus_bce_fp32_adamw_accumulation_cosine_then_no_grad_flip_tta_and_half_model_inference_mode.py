"""Building-footprint segmentation (SpaceNet / Inria-like) on 4-band RGB+NIR aerial tiles with a semantic
FPN (Kirillov et al. 2019 panoptic FPN head) on a torchvision resnet34 backbone.

Backbone: torchvision resnet34 (random init) with its first conv widened to 4 bands (the red kernel copied
into the NIR slot), layers 1-4 taken by torchvision.models._utils.IntermediateLayerGetter; neck:
torchvision.ops.FeaturePyramidNetwork to 256 channels; head: each level through 3x3 conv + GroupNorm(32)
+ ReLU (+ bilinear 2x upsampling per level until 1/4 scale), the four summed, a 1x1 conv to one logit and
a 4x bilinear upsampling to the tile. A forward hook on the FPN records the pyramid shapes once. Loss:
BCEWithLogits + soft Dice (log-cosh free, plain 1 - dice). 512 x 512 tiles, uint8 imagery made on the
host, batch 16 as two accumulated micro-batches of 8, fp32, AdamW (lr 3e-4, weight decay 1e-4) with
CosineAnnealingLR, set_to_none zero_grad.

Phases: the first (accumulated) step; 3 more steps; validation under torch.no_grad with 4-way flip test-time
augmentation (identity, h, v, hv) averaged over sigmoid probabilities at batch 8 for 32 tiles, IoU on the
device; then the model converted with .half() and run under torch.inference_mode on 64 tiles at batch 32
in fp16 with the binary masks moved to the host as uint8. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models._utils import IntermediateLayerGetter
from torchvision.ops import FeaturePyramidNetwork

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19304)
if SMALL:
    MICRO, ACCUM, STEPS, TILE, VAL_N, VAL_B, INF_N, INF_B = 2, 2, 1, 128, 4, 2, 4, 2
else:
    MICRO, ACCUM, STEPS, TILE, VAL_N, VAL_B, INF_N, INF_B = 8, 2, 3, 512, 32, 8, 64, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
MEAN = torch.tensor([0.485, 0.456, 0.406, 0.5], device=device)[None, :, None, None] * 255
STD = torch.tensor([0.229, 0.224, 0.225, 0.25], device=device)[None, :, None, None] * 255


class SemanticFPN(nn.Module):
    def __init__(self, bands=4, ch=256, head_ch=128):
        super().__init__()
        r = torchvision.models.resnet34()
        conv = nn.Conv2d(bands, 64, 7, 2, 3, bias=False)
        with torch.no_grad():
            conv.weight[:, :3] = r.conv1.weight
            conv.weight[:, 3] = r.conv1.weight[:, 0]
        r.conv1 = conv
        self.body = IntermediateLayerGetter(r, {"layer1": "0", "layer2": "1", "layer3": "2", "layer4": "3"})
        self.fpn = FeaturePyramidNetwork([64, 128, 256, 512], ch)
        self.heads = nn.ModuleList()
        for lvl in range(4):
            layers = []
            for j in range(max(lvl, 1)):
                layers += [
                    nn.Conv2d(ch if j == 0 else head_ch, head_ch, 3, padding=1, bias=False),
                    nn.GroupNorm(32, head_ch),
                    nn.ReLU(inplace=True),
                ]
                if lvl > 0:
                    layers.append(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))
            self.heads.append(nn.Sequential(*layers))
        self.classifier = nn.Conv2d(head_ch, 1, 1)

    def forward(self, x):
        feats = self.fpn(self.body(x))
        y = sum(head(feats[str(i)]) for i, head in enumerate(self.heads))
        return F.interpolate(self.classifier(y), scale_factor=4, mode="bilinear", align_corners=False)


pyramid = {}


def record_shapes(module, inp, out):
    if not pyramid:
        pyramid.update({k: tuple(v.shape) for k, v in out.items()})


model = SemanticFPN().to(device)
model.fpn.register_forward_hook(record_shapes)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS + 1)
print(f"semantic FPN params {sum(p.numel() for p in model.parameters())}")


def tiles(n):
    img = torch.randint(0, 256, (n, 4, TILE, TILE), dtype=torch.uint8)
    mask = torch.zeros(n, 1, TILE, TILE)
    for i in range(n):
        for _ in range(6):
            r, c = torch.randint(0, TILE - 48, (2,)).tolist()
            h, w = torch.randint(12, 48, (2,)).tolist()
            mask[i, 0, r : r + h, c : c + w] = 1
    img, mask = img.to(device), mask.to(device)
    return (img.float() - MEAN) / STD, mask


def loss_fn(logits, y):
    bce = F.binary_cross_entropy_with_logits(logits, y)
    p = logits.sigmoid()
    dice = 1 - (2 * (p * y).sum((2, 3)) + 1) / (p.sum((2, 3)) + y.sum((2, 3)) + 1)
    return bce + dice.mean()


def step():
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(ACCUM):
        x, y = tiles(MICRO)
        loss = loss_fn(model(x), y) / ACCUM
        loss.backward()
        total += loss.item()
    opt.step()
    sched.step()
    return total


model.train()
print(f"step 0 loss {step():.4f} pyramid {pyramid}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
inter = torch.zeros((), device=device)
union = torch.zeros((), device=device)
with torch.no_grad():
    for _ in range(0, VAL_N, VAL_B):
        x, y = tiles(VAL_B)
        prob = model(x).sigmoid()
        prob += model(x.flip(3)).sigmoid().flip(3)
        prob += model(x.flip(2)).sigmoid().flip(2)
        prob += model(x.flip(2, 3)).sigmoid().flip(2, 3)
        pred = prob / 4 > 0.5
        inter += (pred & (y > 0)).sum()
        union += (pred | (y > 0)).sum()
print(f"TTA IoU {(inter / union.clamp(min=1)).item():.4f}")
if device == "cuda":
    print(f"tta peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

if amp:
    model.half()
masks = []
with torch.inference_mode():
    for _ in range(0, INF_N, INF_B):
        x, _ = tiles(INF_B)
        if amp:
            x = x.half()
        masks.append((model(x) > 0).to(torch.uint8).cpu())
masks = torch.cat(masks)
print(f"inference masks {tuple(masks.shape)} building fraction {masks.float().mean():.4f}")
if device == "cuda":
    print(
        f"half allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
