"""PointPillars after Lang et al. 2019 ("PointPillars: Fast Encoders for Object Detection from Point
Clouds"), written by hand in the style of OpenPCDet's pointpillar.yaml for KITTI: the data loader's
pillars arrive from the host (per sample a variable number of non-empty pillars, up to 12,000, of at most
32 points with x, y, z, intensity; zero-padded; the point counts and the (batch, z, y, x) pillar
coordinates as int32), the PillarVFE on the device (the cluster offsets from the pillar's point mean,
the centre offsets from the pillar's grid centre, 10 features masked by the padding indicator, one PFN
layer Linear 10 -> 64 without bias, BatchNorm1d, ReLU and a max over the points), the
PointPillarScatter to a 64 x 496 x 432 BEV pseudo-image per sample (a zeros canvas filled by index for
each sample's pillars, selected by a boolean batch mask, then stacked), the BaseBEVBackbone (three
blocks of 4, 6, 6 Conv2d 3 x 3 + BatchNorm2d + ReLU at strides 2, 2, 2 with 64, 128, 256 filters, each
upsampled by ConvTranspose2d to 128 channels at stride 1, 2, 4 and concatenated to 384), and the
AnchorHeadSingle (1 x 1 convolutions for 3 classes x 2 rotations x 3 anchor sizes: 18 class logits, 42
box residuals, 12 direction logits). The losses as OpenPCDet writes them: a sigmoid focal loss (alpha
0.25, gamma 2) over the anchors normalised by the positives, the weighted smooth L1 on the box residuals
with the sin-difference encoding of the angle, and the direction cross-entropy; the anchor targets come
from the host with the batch. The network under fp16 autocast with torch.amp.GradScaler, AdamW (lr 3e-3,
weight decay 0.01) with OneCycleLR, the 2-D backbone and head in channels_last, gradients clipped at 10,
batch 6: the first step its own phase, then 3 steps; then evaluation under inference_mode and fp16
autocast at batch 8: sigmoid scores, the top 4,096 anchors per sample by the best class score, decoded
boxes and torchvision's NMS on the axis-aligned BEV boxes at 0.01 IoU, the detections moved to the
host. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18305)
gen = torch.Generator().manual_seed(18305)
if SMALL:
    B, STEPS, EVAL_B, MAX_PILLARS, NX, NY, PRE_NMS = 2, 2, 2, 600, 64, 72, 256
else:
    B, STEPS, EVAL_B, MAX_PILLARS, NX, NY, PRE_NMS = 6, 4, 8, 12000, 432, 496, 4096
MAX_POINTS, NUM_CLASS, NUM_ANCHORS_PER_LOC = 32, 3, 6
VOXEL = (0.16, 0.16, 4.0)
PC_RANGE = (0.0, -39.68, -3.0, 69.12, 39.68, 1.0)
device = "cuda" if torch.cuda.is_available() else "cpu"


def load_batch(bs):
    # what the collate function hands over: pillars of several samples concatenated along dim 0
    voxels, num_points, coords = [], [], []
    for b in range(bs):
        n = int(torch.randint(MAX_PILLARS * 3 // 4, MAX_PILLARS + 1, (1,), generator=gen))
        flat = torch.randperm(NX * NY, generator=gen)[:n]
        ys, xs = flat // NX, flat % NX
        npts = torch.randint(1, MAX_POINTS + 1, (n,), generator=gen)
        pts = torch.rand(n, MAX_POINTS, 4, generator=gen)
        pts[..., 0] = (xs[:, None] + pts[..., 0]) * VOXEL[0] + PC_RANGE[0]
        pts[..., 1] = (ys[:, None] + pts[..., 1]) * VOXEL[1] + PC_RANGE[1]
        pts[..., 2] = pts[..., 2] * 4.0 + PC_RANGE[2]
        pts = pts * (torch.arange(MAX_POINTS)[None, :] < npts[:, None]).unsqueeze(-1)
        voxels.append(pts)
        num_points.append(npts)
        coords.append(torch.stack([torch.full_like(xs, b), torch.zeros_like(xs), ys, xs], 1))
    n_anchor = NY // 2 * NX // 2 * NUM_ANCHORS_PER_LOC
    labels = torch.zeros(bs, n_anchor, dtype=torch.int64)
    pos = torch.randint(0, n_anchor, (bs, 48), generator=gen)
    labels.scatter_(1, pos, torch.randint(1, NUM_CLASS + 1, (bs, 48), generator=gen))
    labels[torch.rand(bs, n_anchor, generator=gen) < 0.05] = -1  # ignored anchors
    box_targets = torch.randn(bs, n_anchor, 7, generator=gen) * 0.1
    batch = {
        "voxels": torch.cat(voxels),
        "voxel_num_points": torch.cat(num_points).int(),
        "voxel_coords": torch.cat(coords).int(),
        "box_cls_labels": labels,
        "box_reg_targets": box_targets,
        "dir_targets": torch.randint(0, 2, (bs, n_anchor), generator=gen),
    }
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def get_paddings_indicator(actual_num, max_num, axis=0):
    actual_num = torch.unsqueeze(actual_num, axis + 1)
    max_num_shape = [1] * len(actual_num.shape)
    max_num_shape[axis + 1] = -1
    max_num = torch.arange(max_num, dtype=torch.int, device=actual_num.device).view(max_num_shape)
    return actual_num.int() > max_num


class PillarVFE(nn.Module):
    def __init__(self, num_filters=64):
        super().__init__()
        self.linear = nn.Linear(10, num_filters, bias=False)
        self.norm = nn.BatchNorm1d(num_filters, eps=1e-3, momentum=0.01)
        self.voxel_x, self.voxel_y, self.voxel_z = VOXEL
        self.x_offset = VOXEL[0] / 2 + PC_RANGE[0]
        self.y_offset = VOXEL[1] / 2 + PC_RANGE[1]
        self.z_offset = VOXEL[2] / 2 + PC_RANGE[2]

    def forward(self, voxel_features, voxel_num_points, coords):
        points_mean = voxel_features[:, :, :3].sum(dim=1, keepdim=True) / voxel_num_points.type_as(
            voxel_features
        ).view(-1, 1, 1)
        f_cluster = voxel_features[:, :, :3] - points_mean
        f_center = torch.zeros_like(voxel_features[:, :, :3])
        f_center[:, :, 0] = voxel_features[:, :, 0] - (
            coords[:, 3].to(voxel_features.dtype).unsqueeze(1) * self.voxel_x + self.x_offset
        )
        f_center[:, :, 1] = voxel_features[:, :, 1] - (
            coords[:, 2].to(voxel_features.dtype).unsqueeze(1) * self.voxel_y + self.y_offset
        )
        f_center[:, :, 2] = voxel_features[:, :, 2] - (
            coords[:, 1].to(voxel_features.dtype).unsqueeze(1) * self.voxel_z + self.z_offset
        )
        features = torch.cat([voxel_features, f_cluster, f_center], dim=-1)
        voxel_count = features.shape[1]
        mask = get_paddings_indicator(voxel_num_points, voxel_count, axis=0)
        mask = torch.unsqueeze(mask, -1).type_as(voxel_features)
        features *= mask
        x = self.linear(features)
        x = self.norm(x.permute(0, 2, 1)).permute(0, 2, 1)
        x = F.relu(x)
        return torch.max(x, dim=1, keepdim=True)[0].squeeze(1)


class PointPillarScatter(nn.Module):
    def __init__(self, num_bev_features, nx, ny):
        super().__init__()
        self.num_bev_features, self.nx, self.ny, self.nz = num_bev_features, nx, ny, 1

    def forward(self, pillar_features, coords, batch_size):
        batch_spatial_features = []
        for batch_idx in range(batch_size):
            spatial_feature = torch.zeros(
                self.num_bev_features,
                self.nz * self.nx * self.ny,
                dtype=pillar_features.dtype,
                device=pillar_features.device,
            )
            batch_mask = coords[:, 0] == batch_idx
            this_coords = coords[batch_mask, :]
            indices = this_coords[:, 1] + this_coords[:, 2] * self.nx + this_coords[:, 3]
            indices = indices.type(torch.long)
            pillars = pillar_features[batch_mask, :]
            pillars = pillars.t()
            spatial_feature[:, indices] = pillars
            batch_spatial_features.append(spatial_feature)
        batch_spatial_features = torch.stack(batch_spatial_features, 0)
        return batch_spatial_features.view(batch_size, self.num_bev_features * self.nz, self.ny, self.nx)


class BaseBEVBackbone(nn.Module):
    def __init__(
        self,
        c_in=64,
        layer_nums=(3, 5, 5),
        strides=(2, 2, 2),
        filters=(64, 128, 256),
        up_strides=(1, 2, 4),
        up_filters=(128, 128, 128),
    ):
        super().__init__()
        self.blocks = nn.ModuleList()
        self.deblocks = nn.ModuleList()
        c_in_list = [c_in, *filters[:-1]]
        for idx in range(len(layer_nums)):
            cur = [
                nn.ZeroPad2d(1),
                nn.Conv2d(c_in_list[idx], filters[idx], 3, stride=strides[idx], padding=0, bias=False),
                nn.BatchNorm2d(filters[idx], eps=1e-3, momentum=0.01),
                nn.ReLU(),
            ]
            for _ in range(layer_nums[idx]):
                cur += [
                    nn.Conv2d(filters[idx], filters[idx], 3, padding=1, bias=False),
                    nn.BatchNorm2d(filters[idx], eps=1e-3, momentum=0.01),
                    nn.ReLU(),
                ]
            self.blocks.append(nn.Sequential(*cur))
            self.deblocks.append(
                nn.Sequential(
                    nn.ConvTranspose2d(
                        filters[idx], up_filters[idx], up_strides[idx], stride=up_strides[idx], bias=False
                    ),
                    nn.BatchNorm2d(up_filters[idx], eps=1e-3, momentum=0.01),
                    nn.ReLU(),
                )
            )

    def forward(self, x):
        ups = []
        for block, deblock in zip(self.blocks, self.deblocks, strict=True):
            x = block(x)
            ups.append(deblock(x))
        return torch.cat(ups, dim=1)


class AnchorHeadSingle(nn.Module):
    def __init__(self, c_in=384):
        super().__init__()
        self.conv_cls = nn.Conv2d(c_in, NUM_ANCHORS_PER_LOC * NUM_CLASS, 1)
        self.conv_box = nn.Conv2d(c_in, NUM_ANCHORS_PER_LOC * 7, 1)
        self.conv_dir_cls = nn.Conv2d(c_in, NUM_ANCHORS_PER_LOC * 2, 1)
        nn.init.constant_(self.conv_cls.bias, -4.595)
        nn.init.normal_(self.conv_box.weight, mean=0, std=0.001)

    def forward(self, x):
        cls_preds = self.conv_cls(x).permute(0, 2, 3, 1).contiguous()
        box_preds = self.conv_box(x).permute(0, 2, 3, 1).contiguous()
        dir_preds = self.conv_dir_cls(x).permute(0, 2, 3, 1).contiguous()
        return cls_preds, box_preds, dir_preds


class PointPillars(nn.Module):
    def __init__(self):
        super().__init__()
        self.vfe = PillarVFE(64)
        self.map_to_bev = PointPillarScatter(64, NX, NY)
        self.backbone_2d = BaseBEVBackbone()
        self.dense_head = AnchorHeadSingle()

    def forward(self, batch, batch_size):
        pillar_features = self.vfe(batch["voxels"], batch["voxel_num_points"], batch["voxel_coords"])
        spatial_features = self.map_to_bev(pillar_features, batch["voxel_coords"], batch_size)
        spatial_features = spatial_features.contiguous(memory_format=torch.channels_last)
        return self.dense_head(self.backbone_2d(spatial_features))


def sigmoid_focal_loss(input, target, weights, alpha=0.25, gamma=2.0):
    pred_sigmoid = torch.sigmoid(input)
    alpha_weight = target * alpha + (1 - target) * (1 - alpha)
    pt = target * (1.0 - pred_sigmoid) + (1.0 - target) * pred_sigmoid
    focal_weight = alpha_weight * torch.pow(pt, gamma)
    bce_loss = torch.clamp(input, min=0) - input * target + torch.log1p(torch.exp(-torch.abs(input)))
    return focal_weight * bce_loss * weights.unsqueeze(-1)


def weighted_smooth_l1(input, target, weights, beta=1.0 / 9.0):
    diff = input - target
    n = torch.abs(diff)
    loss = torch.where(n < beta, 0.5 * n**2 / beta, n - 0.5 * beta)
    code_weights = torch.ones(7, device=input.device)
    return loss * code_weights * weights.unsqueeze(-1)


def add_sin_difference(boxes1, boxes2, dim=6):
    rad_pred_encoding = torch.sin(boxes1[..., dim : dim + 1]) * torch.cos(boxes2[..., dim : dim + 1])
    rad_tg_encoding = torch.cos(boxes1[..., dim : dim + 1]) * torch.sin(boxes2[..., dim : dim + 1])
    boxes1 = torch.cat([boxes1[..., :dim], rad_pred_encoding, boxes1[..., dim + 1 :]], dim=-1)
    boxes2 = torch.cat([boxes2[..., :dim], rad_tg_encoding, boxes2[..., dim + 1 :]], dim=-1)
    return boxes1, boxes2


def get_loss(cls_preds, box_preds, dir_preds, batch, batch_size):
    box_cls_labels = batch["box_cls_labels"]
    cared = box_cls_labels >= 0
    positives = box_cls_labels > 0
    negatives = box_cls_labels == 0
    cls_weights = (negatives * 1.0 + positives * 1.0).float()
    reg_weights = positives.float()
    pos_normalizer = positives.sum(1, keepdim=True).float()
    reg_weights /= torch.clamp(pos_normalizer, min=1.0)
    cls_weights /= torch.clamp(pos_normalizer, min=1.0)
    cls_targets = box_cls_labels * cared.type_as(box_cls_labels)
    one_hot_targets = torch.zeros(
        *list(cls_targets.shape), NUM_CLASS + 1, dtype=cls_preds.dtype, device=cls_targets.device
    )
    one_hot_targets.scatter_(-1, cls_targets.unsqueeze(dim=-1).long(), 1.0)
    one_hot_targets = one_hot_targets[..., 1:]
    cls_preds = cls_preds.view(batch_size, -1, NUM_CLASS)
    cls_loss = sigmoid_focal_loss(cls_preds, one_hot_targets, cls_weights).sum() / batch_size
    box_preds = box_preds.view(batch_size, -1, 7)
    box_preds_sin, reg_targets_sin = add_sin_difference(box_preds, batch["box_reg_targets"])
    loc_loss = weighted_smooth_l1(box_preds_sin, reg_targets_sin, reg_weights).sum() / batch_size * 2.0
    dir_logits = dir_preds.view(batch_size, -1, 2)
    dir_loss = F.cross_entropy(dir_logits.transpose(1, 2), batch["dir_targets"], reduction="none")
    dir_loss = (dir_loss * reg_weights).sum() / batch_size * 0.2
    return cls_loss + loc_loss + dir_loss


amp_device = "cuda" if device == "cuda" else "cpu"
model = PointPillars().to(device)
model.backbone_2d.to(memory_format=torch.channels_last)
model.dense_head.to(memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.95, 0.99), weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, max_lr=3e-3, total_steps=80 * 3712 // 6, pct_start=0.4, div_factor=10
)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    batch = load_batch(B)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(amp_device, dtype=torch.float16, enabled=device == "cuda"):
        cls_preds, box_preds, dir_preds = model(batch, B)
    loss = get_loss(cls_preds.float(), box_preds.float(), dir_preds.float(), batch, B)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    print(
        f"step {step} loss {loss.item():.4f} grad norm {grad_norm.item():.3f} "
        f"pillars {batch['voxels'].shape[0]}"
    )
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
del batch, cls_preds, box_preds, dir_preds, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
n_det = 0
with torch.inference_mode(), torch.autocast(amp_device, dtype=torch.float16, enabled=device == "cuda"):
    batch = load_batch(EVAL_B)
    cls_preds, box_preds, dir_preds = model(batch, EVAL_B)
    cls_scores = torch.sigmoid(cls_preds.view(EVAL_B, -1, NUM_CLASS).float())
    boxes = box_preds.view(EVAL_B, -1, 7).float()
    for b in range(EVAL_B):
        scores, labels = cls_scores[b].max(dim=-1)
        top_scores, top_idx = scores.topk(PRE_NMS)
        top_boxes = boxes[b, top_idx]
        bev = torch.stack(
            [
                top_boxes[:, 0] - top_boxes[:, 3].exp() / 2,
                top_boxes[:, 1] - top_boxes[:, 4].exp() / 2,
                top_boxes[:, 0] + top_boxes[:, 3].exp() / 2,
                top_boxes[:, 1] + top_boxes[:, 4].exp() / 2,
            ],
            dim=1,
        )
        keep = torchvision.ops.nms(bev, top_scores, 0.01)[:500]
        dets = torch.cat(
            [top_boxes[keep], top_scores[keep, None], labels[top_idx][keep, None].float()], 1
        ).cpu()
        n_det += dets.shape[0]
print(f"detections {n_det}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
