"""DBNet after Liao et al. 2020 ("Real-time Scene Text Detection with Differentiable Binarization") and
the MhLiao/DB repository's SegDetector, written by hand over torchvision backbones built with no
weights: ResNet-18's C2..C5 (64/128/256/512 channels at 1/4..1/32), 1 x 1 lateral convolutions to 256
(no bias), the top-down path by nearest 2x upsampling and addition, 3 x 3 output convolutions to 64
upsampled by 8/4/2 and concatenated to 256 channels at 1/4; the probability head (3 x 3 conv, BN, ReLU,
two stride-2 ConvTranspose2d back to full resolution, sigmoid) and the threshold head of the same form;
during training the approximate binary map 1 / (1 + exp(-50 (P - T))). DB's L1BalanceCELoss: balanced
binary cross-entropy over the shrink map with OHEM (the hardest 3x-positives negatives by topk; the
counts come with the batch from the host, as the repository's data loader computes the maps there), Dice
loss over the binary map, masked L1 over the threshold map (weights 5, 1, 10). fp16 autocast for the
network with torch.amp.GradScaler (the loss in fp32 outside autocast, binary_cross_entropy being
autocast-unsafe), SGD (lr 7e-3, momentum 0.9, weight decay 1e-4) with a poly schedule; batch 16 at 640 x
640; the first step its own phase, then 3 steps; inference under inference_mode with fp16 autocast at
736 x 1280 (batch 8), the probability map thresholded at 0.3 and the binary mask's per-image box-score
means; then a ResNet-50 backbone variant (C2..C5 of 256..2,048 channels) fine-tuned under bf16 autocast
in channels_last with AdamW (lr 1e-4), 2 steps at batch 8 x 1024 x 1024; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18005)
gen = torch.Generator().manual_seed(18005)
if SMALL:
    B, IMG, STEPS, EVAL_B, EVAL_HW, R50_B, R50_IMG = 2, 64, 2, 2, (64, 96), 2, 64
else:
    B, IMG, STEPS, EVAL_B, EVAL_HW, R50_B, R50_IMG = 16, 640, 4, 8, (736, 1280), 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"


class Backbone(nn.Module):
    def __init__(self, arch):
        super().__init__()
        r = getattr(torchvision.models, arch)(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool)
        self.layer1, self.layer2, self.layer3, self.layer4 = r.layer1, r.layer2, r.layer3, r.layer4

    def forward(self, x):
        x = self.stem(x)
        c2 = self.layer1(x)
        c3 = self.layer2(c2)
        c4 = self.layer3(c3)
        c5 = self.layer4(c4)
        return c2, c3, c4, c5


def head(inner, bias=False):
    return nn.Sequential(
        nn.Conv2d(inner, inner // 4, 3, padding=1, bias=bias),
        nn.BatchNorm2d(inner // 4),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(inner // 4, inner // 4, 2, 2),
        nn.BatchNorm2d(inner // 4),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(inner // 4, 1, 2, 2),
        nn.Sigmoid(),
    )


class SegDetector(nn.Module):
    def __init__(self, in_channels, inner=256, k=50):
        super().__init__()
        self.k = k
        self.up5 = nn.Upsample(scale_factor=2, mode="nearest")
        self.up4 = nn.Upsample(scale_factor=2, mode="nearest")
        self.up3 = nn.Upsample(scale_factor=2, mode="nearest")
        self.in5 = nn.Conv2d(in_channels[-1], inner, 1, bias=False)
        self.in4 = nn.Conv2d(in_channels[-2], inner, 1, bias=False)
        self.in3 = nn.Conv2d(in_channels[-3], inner, 1, bias=False)
        self.in2 = nn.Conv2d(in_channels[-4], inner, 1, bias=False)
        self.out5 = nn.Sequential(
            nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False), nn.Upsample(scale_factor=8)
        )
        self.out4 = nn.Sequential(
            nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False), nn.Upsample(scale_factor=4)
        )
        self.out3 = nn.Sequential(
            nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False), nn.Upsample(scale_factor=2)
        )
        self.out2 = nn.Conv2d(inner, inner // 4, 3, padding=1, bias=False)
        self.binarize = head(inner)
        self.thresh = head(inner)

    def forward(self, features):
        c2, c3, c4, c5 = features
        in5 = self.in5(c5)
        out4 = self.up5(in5) + self.in4(c4)
        out3 = self.up4(out4) + self.in3(c3)
        out2 = self.up3(out3) + self.in2(c2)
        fuse = torch.cat((self.out5(in5), self.out4(out4), self.out3(out3), self.out2(out2)), 1)
        binary = self.binarize(fuse)
        if not self.training:
            return binary
        thresh = self.thresh(fuse)
        thresh_binary = torch.reciprocal(1 + torch.exp(-self.k * (binary - thresh)))
        return binary, thresh, thresh_binary


class DBNet(nn.Module):
    def __init__(self, arch, in_channels):
        super().__init__()
        self.backbone = Backbone(arch)
        self.decoder = SegDetector(in_channels)

    def forward(self, x):
        return self.decoder(self.backbone(x))


def make_maps(bs, size, boxes=24):
    """The data loader's shrink map, its mask, the threshold map and its mask, on the host."""
    gt = torch.zeros(bs, 1, size, size)
    mask = torch.ones(bs, size, size)
    thresh_map = torch.full((bs, size, size), 0.3)
    thresh_mask = torch.zeros(bs, size, size)
    for i in range(bs):
        xs = torch.randint(0, size - size // 8, (boxes,), generator=gen)
        ys = torch.randint(0, size - size // 16, (boxes,), generator=gen)
        ws = torch.randint(size // 32, size // 8, (boxes,), generator=gen)
        hs = torch.randint(size // 64 + 1, size // 16, (boxes,), generator=gen)
        for x, y, w, h in zip(xs.tolist(), ys.tolist(), ws.tolist(), hs.tolist(), strict=True):
            gt[i, 0, y : y + h, x : x + w] = 1
            thresh_mask[i, max(y - 2, 0) : y + h + 2, max(x - 2, 0) : x + w + 2] = 1
            thresh_map[i, max(y - 2, 0) : y + h + 2, max(x - 2, 0) : x + w + 2] = 0.7
        mask[i, :4, :4] = 0  # an ignored (illegible) region
    positive = (gt[:, 0] * mask).byte()
    negative = ((1 - gt[:, 0]) * mask).byte()
    positive_count = int(positive.float().sum())
    negative_count = min(int(negative.float().sum()), int(positive_count * 3.0))
    return dict(
        gt=gt.to(device),
        mask=mask.to(device),
        thresh_map=thresh_map.to(device),
        thresh_mask=thresh_mask.to(device),
        positive_count=positive_count,
        negative_count=negative_count,
    )


def balance_bce(pred, gt, mask, positive_count, negative_count, eps=1e-6):
    positive = (gt * mask).byte()
    negative = ((1 - gt) * mask).byte()
    loss = F.binary_cross_entropy(pred, gt, reduction="none")[:, 0, :, :]
    positive_loss = loss * positive.float()
    negative_loss = loss * negative.float()
    negative_loss, _ = torch.topk(negative_loss.view(-1), negative_count)
    return (positive_loss.sum() + negative_loss.sum()) / (positive_count + negative_count + eps)


def dice_loss(pred, gt, mask, eps=1e-6):
    pred, gt = pred[:, 0, :, :], gt[:, 0, :, :]
    intersection = (pred * gt * mask).sum()
    union = (pred * mask).sum() + (gt * mask).sum() + eps
    return 1 - 2.0 * intersection / union


def mask_l1(pred, gt, mask):
    mask_sum = mask.sum()
    return (torch.abs(pred[:, 0] - gt) * mask).sum() / mask_sum


def db_loss(outputs, batch):
    binary, thresh, thresh_binary = (o.float() for o in outputs)
    bce = balance_bce(binary, batch["gt"], batch["mask"], batch["positive_count"], batch["negative_count"])
    l1 = mask_l1(thresh, batch["thresh_map"], batch["thresh_mask"])
    dice = dice_loss(thresh_binary, batch["gt"], batch["mask"])
    return dice + 10 * l1 + 5 * bce


model = DBNet("resnet18", [64, 128, 256, 512]).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.SGD(model.parameters(), lr=7e-3, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.PolynomialLR(optimizer, total_iters=1200, power=0.9)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**12, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    batch = make_maps(B, IMG)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        outputs = model(images)
    loss = db_loss(outputs, batch)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f} k {batch['negative_count']}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del images, batch, outputs, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    images = torch.randn(EVAL_B, 3, *EVAL_HW, device=device)
    prob = model(images)
    bitmap = prob[:, 0] > 0.3
    score = (prob[:, 0].float() * bitmap).sum(dim=(1, 2)) / bitmap.sum(dim=(1, 2)).clamp(min=1)
print(f"eval prob {tuple(prob.shape)} score {score.mean().item():.4f}")
del images, prob, bitmap, score
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, scheduler, scaler
r50 = DBNet("resnet50", [256, 512, 1024, 2048]).to(device, memory_format=torch.channels_last)
r50_opt = torch.optim.AdamW(r50.parameters(), lr=1e-4, weight_decay=1e-4)
r50.train()
for step in range(2):
    images = torch.randn(R50_B, 3, R50_IMG, R50_IMG, device=device).contiguous(
        memory_format=torch.channels_last
    )
    batch = make_maps(R50_B, R50_IMG)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        outputs = r50(images)
    loss = db_loss(outputs, batch)
    r50_opt.zero_grad(set_to_none=True)
    loss.backward()
    r50_opt.step()
    print(f"r50 step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"r50 allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
