"""Instance segmentation without Mask R-CNN's machinery, written by hand. A CondInst-style model
(Tian et al. 2020) on torchvision's `resnet_fpn_backbone("resnet50", weights=None, trainable_layers=3)`
(FrozenBatchNorm2d, P2-P5 + max-pool P6, 256 channels): a shared tower of 4 conv3x3 + GroupNorm(32) +
ReLU run on P3-P6, an 80-class classification conv and a controller conv emitting 169 dynamic
parameters per location; a mask branch summing refined P3/P4/P5 (upsampled to P3) and 4 conv3x3 of 128
down to 8 channels at stride 8. Per image 20 ground-truth instances at random box positions: their
controller parameters are gathered at the P3 location of each box centre, the mask features are
concatenated with relative coordinates (normalized by 64) and run through the 3-layer dynamic 1x1
head (8, 8, 1 channels) as one grouped F.conv2d over all instances, upsampled x2 to stride 4, and a
Dice loss against the boxes' bitmasks subsampled at stride 4; torchvision's sigmoid_focal_loss over
every location of P3-P6 against one-hot targets at the instance locations. bf16 autocast, AdamW (lr
1e-4, weight decay 1e-4), clip_grad_norm_ 10, batch 8 at 800 x 1088: a first step then 3 steps.
Inference under inference_mode at batch 4: per image the top 100 scores over all levels and classes,
their parameters gathered, the dynamic head, masks upsampled to 800 x 1088, thresholded at 0.5 into
bool masks and their areas. Then a Mask R-CNN-style mask head by hand on the same backbone:
torchvision's MultiScaleRoIAlign (P2-P5, 14 x 14, sampling ratio 2) over 64 boxes per image, 4
conv3x3 of 256 + ReLU, ConvTranspose2d x2, per-class 28 x 28 logits picked by the box labels, targets
from roi_align of the full-resolution bitmasks, BCE with logits; fp16 autocast with GradScaler and SGD
momentum (lr 0.02), 2 steps at batch 4; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.detection.backbone_utils import resnet_fpn_backbone
from torchvision.ops import MultiScaleRoIAlign, roi_align, sigmoid_focal_loss

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18405)
gen = torch.Generator().manual_seed(18405)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, H, W, K, STEPS, IB, TOPK, RB, R = 2, 128, 160, 4, 2, 1, 10, 2, 8
else:
    B, H, W, K, STEPS, IB, TOPK, RB, R = 8, 800, 1088, 20, 4, 4, 100, 4, 64
NUM_CLASSES = 80
STRIDES = [8, 16, 32, 64]
N_PARAMS = (10 * 8 + 8) + (8 * 8 + 8) + (8 * 1 + 1)


class CondInst(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = resnet_fpn_backbone(backbone_name="resnet50", weights=None, trainable_layers=3)
        tower = []
        for _ in range(4):
            tower += [
                nn.Conv2d(256, 256, 3, padding=1, bias=False),
                nn.GroupNorm(32, 256),
                nn.ReLU(inplace=True),
            ]
        self.tower = nn.Sequential(*tower)
        self.cls_logits = nn.Conv2d(256, NUM_CLASSES, 3, padding=1)
        self.controller = nn.Conv2d(256, N_PARAMS, 3, padding=1)
        nn.init.constant_(self.cls_logits.bias, -4.59)
        self.refine = nn.ModuleList(
            [
                nn.Sequential(nn.Conv2d(256, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU())
                for _ in range(3)
            ]
        )
        tower = []
        for _ in range(4):
            tower += [nn.Conv2d(128, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU()]
        self.mask_tower = nn.Sequential(*tower, nn.Conv2d(128, 8, 1))

    def forward(self, images):
        feats = self.backbone(images)
        levels = [feats["1"], feats["2"], feats["3"], feats["pool"]]
        cls_out, ctrl_out = [], []
        for f in levels:
            t = self.tower(f)
            cls_out.append(self.cls_logits(t))
            ctrl_out.append(self.controller(t))
        x = self.refine[0](feats["1"])
        for i, name in ((1, "2"), (2, "3")):
            y = self.refine[i](feats[name])
            x = x + F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
        mask_feats = self.mask_tower(x)
        return feats, cls_out, ctrl_out, mask_feats


def dynamic_mask_head(mask_feats, img_idx, params, centers):
    # mask_feats (B, 8, h, w) at stride 8; params (N, 169); centers (N, 2) in image pixels (x, y)
    n = params.size(0)
    _, _, h, w = mask_feats.shape
    ys = torch.arange(h, device=mask_feats.device, dtype=torch.float32) * 8 + 4
    xs = torch.arange(w, device=mask_feats.device, dtype=torch.float32) * 8 + 4
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    rel_x = (centers[:, 0].view(n, 1, 1) - gx) / 64.0
    rel_y = (centers[:, 1].view(n, 1, 1) - gy) / 64.0
    rel = torch.stack([rel_x, rel_y], dim=1).to(mask_feats.dtype)
    x = torch.cat([rel, mask_feats[img_idx]], dim=1).reshape(1, n * 10, h, w)
    w1, b1, w2, b2, w3, b3 = torch.split(params, [80, 8, 64, 8, 8, 1], dim=1)
    x = F.relu(F.conv2d(x, w1.reshape(n * 8, 10, 1, 1), b1.reshape(-1), groups=n))
    x = F.relu(F.conv2d(x, w2.reshape(n * 8, 8, 1, 1), b2.reshape(-1), groups=n))
    x = F.conv2d(x, w3.reshape(n, 8, 1, 1), b3.reshape(-1), groups=n)
    x = x.reshape(n, 1, h, w)
    return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


def random_instances(bs, k):
    wh = torch.rand(bs, k, 2, generator=gen) * 0.5 + 0.05
    xy = torch.rand(bs, k, 2, generator=gen) * (1 - wh)
    boxes = torch.cat([xy, xy + wh], dim=-1) * torch.tensor([W, H, W, H], dtype=torch.float32)
    labels = torch.randint(0, NUM_CLASSES, (bs, k), generator=gen)
    return boxes.to(device), labels.to(device)


def box_bitmasks(boxes):
    ys = torch.arange(H, device=device).view(1, 1, H, 1) + 0.5
    xs = torch.arange(W, device=device).view(1, 1, 1, W) + 0.5
    b = boxes.unsqueeze(-1).unsqueeze(-1)
    return (xs >= b[..., 0, :, :]) & (xs < b[..., 2, :, :]) & (ys >= b[..., 1, :, :]) & (ys < b[..., 3, :, :])


def dice_loss(logits, targets, eps=1e-5):
    probs = logits.sigmoid().flatten(1)
    targets = targets.flatten(1)
    inter = (probs * targets).sum(1)
    return 1 - (2 * inter + eps) / ((probs**2).sum(1) + (targets**2).sum(1) + eps)


model = CondInst().to(device)
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=1e-4)
print(f"condinst params {sum(p.numel() for p in params) / 1e6:.1f}M trainable")

model.train()
for step in range(STEPS):
    images = torch.randn(B, 3, H, W, device=device)
    boxes, labels = random_instances(B, K)
    bitmasks = box_bitmasks(boxes)  # (B, K, H, W) bool
    centers = (boxes[..., :2] + boxes[..., 2:]) / 2
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        feats, cls_out, ctrl_out, mask_feats = model(images)
        h3, w3 = ctrl_out[0].shape[-2:]
        cx = (centers[..., 0] / 8).long().clamp(max=w3 - 1)
        cy = (centers[..., 1] / 8).long().clamp(max=h3 - 1)
        flat = (cy * w3 + cx).view(B, K)
        inst_params = ctrl_out[0].flatten(2).gather(2, flat.unsqueeze(1).expand(B, N_PARAMS, K))
        inst_params = inst_params.permute(0, 2, 1).reshape(B * K, N_PARAMS)
        img_idx = torch.arange(B, device=device).repeat_interleave(K)
        mask_logits = dynamic_mask_head(mask_feats, img_idx, inst_params, centers.reshape(-1, 2))
        gt = bitmasks.reshape(B * K, H, W)[:, 2::4, 2::4].float()
        loss_mask = dice_loss(mask_logits.float()[:, 0], gt).mean()
        cls_targets = [torch.zeros_like(c, dtype=torch.float32) for c in cls_out]
        cls_targets[0].view(B, NUM_CLASSES, -1)[img_idx, labels.flatten(), flat.flatten()] = 1.0
        loss_cls = sum(
            sigmoid_focal_loss(c.float(), t, reduction="sum")
            for c, t in zip(cls_out, cls_targets, strict=True)
        ) / (B * K)
        loss = loss_cls + loss_mask
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 10.0)
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f} cls {loss_cls.item():.4f} mask {loss_mask.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del (
    images,
    bitmasks,
    feats,
    cls_out,
    ctrl_out,
    mask_feats,
    mask_logits,
    gt,
    cls_targets,
    loss,
    loss_cls,
    loss_mask,
)
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    images = torch.randn(IB, 3, H, W, device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        feats, cls_out, ctrl_out, mask_feats = model(images)
    scores = torch.cat([c.float().sigmoid().flatten(2) for c in cls_out], dim=2)  # (IB, 80, L)
    ctrl = torch.cat([c.flatten(2) for c in ctrl_out], dim=2)  # (IB, 169, L)
    centers_all = []
    for (hh, ww), s in zip([c.shape[-2:] for c in cls_out], STRIDES, strict=True):
        yy, xx = torch.meshgrid(
            torch.arange(hh, device=device), torch.arange(ww, device=device), indexing="ij"
        )
        centers_all.append(torch.stack([xx.flatten() * s + s // 2, yy.flatten() * s + s // 2], dim=1))
    centers_all = torch.cat(centers_all).float()
    total_area = 0
    for i in range(IB):
        top_scores, top_idx = scores[i].flatten().topk(TOPK)
        loc = top_idx % scores.size(2)
        inst_params = ctrl[i][:, loc].t().float()
        logits = dynamic_mask_head(
            mask_feats[i : i + 1].float(),
            torch.zeros(TOPK, dtype=torch.long, device=device),
            inst_params,
            centers_all[loc],
        )
        masks = F.interpolate(logits, size=(H, W), mode="bilinear", align_corners=False)[:, 0].sigmoid() > 0.5
        total_area += int(masks.sum())
    print(f"inference top {TOPK} mean mask area {total_area / (IB * TOPK):.1f}")
del images, feats, cls_out, ctrl_out, mask_feats, scores, ctrl, logits, masks
if device == "cuda":
    print(f"inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class MaskRCNNHead(nn.Module):
    def __init__(self):
        super().__init__()
        layers = []
        for _ in range(4):
            layers += [nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True)]
        self.convs = nn.Sequential(*layers)
        self.deconv = nn.ConvTranspose2d(256, 256, 2, stride=2)
        self.predictor = nn.Conv2d(256, NUM_CLASSES, 1)

    def forward(self, x):
        return self.predictor(F.relu(self.deconv(self.convs(x))))


backbone = model.backbone
model.train()
mask_head = MaskRCNNHead().to(device)
pooler = MultiScaleRoIAlign(featmap_names=["0", "1", "2", "3"], output_size=14, sampling_ratio=2)
rcnn_params = [p for p in backbone.parameters() if p.requires_grad] + list(mask_head.parameters())
rcnn_opt = torch.optim.SGD(rcnn_params, lr=0.02, momentum=0.9, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
for step in range(2):
    images = torch.randn(RB, 3, H, W, device=device)
    boxes, labels = random_instances(RB, R)
    bitmasks = box_bitmasks(boxes)
    # Mask R-CNN's project_masks_on_boxes: each box crops its own instance's bitmask
    mask_rois = torch.cat(
        [torch.arange(RB * R, device=device, dtype=torch.float32)[:, None], boxes.reshape(-1, 4)], dim=1
    )
    targets = roi_align(bitmasks.reshape(RB * R, 1, H, W).float(), mask_rois, (28, 28), 1.0)[:, 0] >= 0.5
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
        feats = backbone(images)
        pooled = pooler(feats, list(boxes.unbind(0)), [(H, W)] * RB)
        mask_logits = mask_head(pooled)
        picked = mask_logits[torch.arange(RB * R, device=device), labels.flatten()]
        loss = F.binary_cross_entropy_with_logits(picked.float(), targets.float())
    rcnn_opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(rcnn_opt)
    scaler.update()
    print(f"mask head step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"mask head allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
