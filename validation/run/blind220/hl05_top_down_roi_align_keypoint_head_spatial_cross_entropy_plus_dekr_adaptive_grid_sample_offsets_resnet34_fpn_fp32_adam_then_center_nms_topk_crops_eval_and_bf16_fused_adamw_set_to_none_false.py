"""Two pose heads over one ResNet-34 + FPN-like stride-8 feature map (torchvision resnet34, random init:
layer3 upsampled bilinearly and added to a 1x1 lateral of layer2, then a 3x3 conv to 256 channels).

Top-down: person boxes per image are cropped from the feature map by torchvision.ops.roi_align (32 x 24,
spatial_scale 1/8, sampling_ratio 2, aligned=True); a Mask R-CNN-style keypoint head (4 x conv3x3 +
GroupNorm + ReLU, then ConvTranspose2d(4, 2, 1) to 17 maps of 64 x 48) is trained with a spatial cross
entropy over each flattened map (invisible joints ignored by ignore_index). Bottom-up, DEKR-style
(Geng et al. 2021): an adaptive convolution whose 9 sampling points per pixel are predicted offsets applied
by F.grid_sample (bilinear, zeros padding, align_corners=False) around a base grid, a 1x1 conv over the
9 stacked samples, then 34 joint offsets per pixel (smooth L1 weighted at the centers) and a person-center
heatmap (MSE).

Phases: 3 steps at batch 8 on 512 x 512 images with 12 boxes per image in fp32 with Adam; a no_grad eval at
batch 16 (center heatmap, 3x3 max-pool NMS, top-20 centers, gathered offsets to poses, boxes from the
poses' extents cropped again by roi_align for the keypoint head, argmax decoding); 3 steps at batch 8 on
640 x 640 under bf16 autocast with fused AdamW and zero_grad(set_to_none=False); then inference_mode with
the whole model in fp16 at batch 24. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.ops import roi_align

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2205)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, HALF_BATCH = (2, 2, 2) if SMALL else (8, 16, 24)
RES, RES_BF16 = (128, 160) if SMALL else (512, 640)
BOXES, TOPK, JOINTS = 12, 20, 17
CROP = (32, 24)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet34(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1)
        self.layer2, self.layer3 = r.layer2, r.layer3
        self.lateral = nn.Conv2d(128, 256, 1)
        self.smooth = nn.Conv2d(256, 256, 3, padding=1)

    def forward(self, x):
        c3 = self.layer2(self.stem(x))
        c4 = self.layer3(c3)
        p3 = self.lateral(c3) + F.interpolate(c4, size=c3.shape[-2:], mode="bilinear", align_corners=False)
        return self.smooth(p3)


class KeypointHead(nn.Module):
    def __init__(self):
        super().__init__()
        layers = []
        for _ in range(4):
            layers += [nn.Conv2d(256, 256, 3, padding=1), nn.GroupNorm(32, 256), nn.ReLU(inplace=True)]
        self.convs = nn.Sequential(*layers)
        self.up = nn.ConvTranspose2d(256, JOINTS, 4, 2, 1)

    def forward(self, crops):
        return self.up(self.convs(crops))


class AdaptiveConv(nn.Module):
    """DEKR's adaptive activation: 9 sampling points per pixel, offsets predicted, sampled by grid_sample."""

    def __init__(self, cin, cout):
        super().__init__()
        self.offset = nn.Conv2d(cin, 18, 3, padding=1)
        nn.init.zeros_(self.offset.weight)
        nn.init.zeros_(self.offset.bias)
        self.proj = nn.Conv2d(cin * 9, cout, 1)
        ky, kx = torch.meshgrid(torch.arange(-1.0, 2.0), torch.arange(-1.0, 2.0), indexing="ij")
        self.register_buffer("kernel", torch.stack([kx.flatten(), ky.flatten()], -1), persistent=False)

    def forward(self, x):
        n, c, h, w = x.shape
        off = self.offset(x).view(n, 9, 2, h, w)
        ys = torch.arange(h, device=x.device, dtype=x.dtype).view(1, 1, h, 1).expand(n, 1, h, w)
        xs = torch.arange(w, device=x.device, dtype=x.dtype).view(1, 1, 1, w).expand(n, 1, h, w)
        samples = []
        for k in range(9):
            px = xs[:, 0] + self.kernel[k, 0] + off[:, k, 0]
            py = ys[:, 0] + self.kernel[k, 1] + off[:, k, 1]
            grid = torch.stack([(2 * px + 1) / w - 1, (2 * py + 1) / h - 1], -1)
            samples.append(F.grid_sample(x, grid.to(x.dtype), mode="bilinear", padding_mode="zeros", align_corners=False))
        return F.relu(self.proj(torch.cat(samples, 1)))


class PoseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.kp_head = KeypointHead()
        self.adaptive = nn.Sequential(AdaptiveConv(256, 128), AdaptiveConv(128, 128))
        self.offsets = nn.Conv2d(128, 2 * JOINTS, 1)
        self.center = nn.Sequential(nn.Conv2d(256, 64, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(64, 1, 1))

    def forward(self, x, boxes):
        feat = self.backbone(x)
        crops = roi_align(feat, boxes, CROP, spatial_scale=1 / 8, sampling_ratio=2, aligned=True)
        return feat, self.kp_head(crops), self.offsets(self.adaptive(feat)), self.center(feat)


def random_boxes(n, res):
    xy = torch.rand(n, BOXES, 2, device=device) * res * 0.6
    wh = torch.rand(n, BOXES, 2, device=device) * res * 0.35 + 32
    return list(torch.cat([xy, (xy + wh).clamp(max=res - 1)], -1).unbind(0))


def losses(kp_logits, offsets, center, n, res):
    r, k, h, w = kp_logits.shape
    target = torch.randint(0, h * w, (r * k,), device=device)
    target = torch.where(torch.rand(r * k, device=device) < 0.3, -100, target)
    kp_loss = F.cross_entropy(kp_logits.float().reshape(r * k, h * w), target, ignore_index=-100)
    fh = res // 8
    off_t = torch.randn(n, 2 * JOINTS, fh, fh, device=device) * 8
    off_w = (torch.rand(n, 1, fh, fh, device=device) > 0.9).float()
    off_loss = (F.smooth_l1_loss(offsets.float(), off_t, reduction="none") * off_w).sum() / off_w.sum().clamp(min=1)
    center_loss = F.mse_loss(center.float(), torch.rand(n, 1, fh, fh, device=device))
    return kp_loss + 0.03 * off_loss + center_loss


model = PoseNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for it in range(3):
    x = torch.randn(BATCH, 3, RES, RES, device=device)
    _, kp, off, ctr = model(x, random_boxes(BATCH, RES))
    loss = losses(kp, off, ctr, BATCH, RES)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"fp32 loss {loss.item():.4f}")
report("roi_align + dekr fp32 adam")

model.eval()
with torch.no_grad():
    x = torch.randn(EVAL_BATCH, 3, RES, RES, device=device)
    feat = model.backbone(x)
    heat = model.center(feat).sigmoid()
    keep = (F.max_pool2d(heat, 3, 1, 1) == heat).float()
    scores, inds = torch.topk((heat * keep).flatten(1), TOPK)
    fh, fw = heat.shape[-2:]
    offsets = model.offsets(model.adaptive(feat)).flatten(2)
    off = offsets.gather(2, inds.unsqueeze(1).expand(-1, 2 * JOINTS, -1)).view(EVAL_BATCH, JOINTS, 2, TOPK)
    cx, cy = (inds % fw).float(), (inds // fw).float()
    poses = torch.stack([cx[:, None] + off[:, :, 0], cy[:, None] + off[:, :, 1]], -1) * 8
    boxes = torch.cat([poses.amin(1), poses.amax(1) + 16], -1).clamp(0, RES - 1)
    crops = roi_align(feat, list(boxes.unbind(0)), CROP, spatial_scale=1 / 8, sampling_ratio=2, aligned=True)
    kp = model.kp_head(crops)
    idx = kp.flatten(2).argmax(2)
print(f"eval centers {scores.mean().item():.4f} crops {tuple(crops.shape)} idx {idx.float().mean().item():.1f}")
report("center nms topk crops eval")

model.train()
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=1e-4, fused=device == "cuda")
for it in range(3):
    x = torch.randn(BATCH, 3, RES_BF16, RES_BF16, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        _, kp, off, ctr = model(x, random_boxes(BATCH, RES_BF16))
    loss = losses(kp, off, ctr, BATCH, RES_BF16)
    opt.zero_grad(set_to_none=False)
    loss.backward()
    opt.step()
    del kp, off, ctr
print(f"bf16 loss {loss.item():.4f}")
report("bf16 fused adamw set_to_none false 640")

del opt
model.eval().half()
with torch.inference_mode():
    x = torch.randn(HALF_BATCH, 3, RES, RES, device=device, dtype=torch.float16)
    boxes = [b.half() for b in random_boxes(HALF_BATCH, RES)]
    feat, kp, off, ctr = model(x, boxes)
print(f"fp16 inference kp {tuple(kp.shape)} off {off.float().abs().mean().item():.4f}")
report("fp16 inference_mode")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
