"""Lift-Splat-Shoot (Philion & Fidler 2020) for BEV vehicle segmentation, six cameras.

Camera encoder: timm efficientnet_b0 (from config, no weights) with features_only at strides 16 and 32,
the stride-32 map upsampled and concatenated (as LSS's Up block), a conv head to D + C = 41 + 64 channels;
"lift" is a softmax over 41 depth bins and the outer product depth x features, a frustum of
[B, N, D, H, W, C]. The camera geometry is fixed (random intrinsics are replaced by a fixed random
assignment of every frustum point to a 200 x 200 BEV cell, a few points falling outside and dropped),
so the voxel ranks, their sort order and the interval ends are computed once on the CPU, as
BEVPool-style implementations precompute them. "Splat" is the cumsum trick of LSS written as a custom
torch.autograd.Function (QuickCumsum: cumsum over the sorted points, take the interval ends, difference;
backward scatters the interval gradient back to every point), then index_put_ into a [B, 200, 200, C] grid.
BEV encoder: torchvision resnet18 trunk (conv1 on 64 channels, layer1-3) with two upsampling stages
to a 1-channel 200 x 200 logit map; BCEWithLogitsLoss with pos_weight 2.13.

Phases: 3 steps under bf16 autocast at batch 4 (24 images of 256 x 704) with the camera encoder under
torch.utils.checkpoint (non-reentrant), AdamW and clip 5.0; an inference_mode evaluation at batch 8 in fp32
with a sigmoid IoU; 3 steps under fp16 autocast with GradScaler and no checkpointing at batch 4, the
optimizer state kept. 3 phases."""

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2312)
device = "cuda"
NCAM, IMH, IMW = 6, 256, 704
D, C = 41, 64
FH, FW = IMH // 16, IMW // 16
BX = BY = 200


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class CamEncode(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = timm.create_model("efficientnet_b0", pretrained=False, features_only=True, out_indices=(3, 4))
        c16, c32 = self.trunk.feature_info.channels()
        self.up = nn.Sequential(
            nn.Conv2d(c16 + c32, 512, 3, padding=1, bias=False), nn.BatchNorm2d(512), nn.ReLU(inplace=True),
            nn.Conv2d(512, 512, 3, padding=1, bias=False), nn.BatchNorm2d(512), nn.ReLU(inplace=True))
        self.depthnet = nn.Conv2d(512, D + C, 1)

    def forward(self, x):
        f16, f32 = self.trunk(x)
        f32 = F.interpolate(f32, size=f16.shape[-2:], mode="bilinear", align_corners=True)
        x = self.depthnet(self.up(torch.cat([f16, f32], dim=1)))
        depth = x[:, :D].softmax(dim=1)
        feat = x[:, D:D + C]
        return depth.unsqueeze(1) * feat.unsqueeze(2)  # [BN, C, D, H, W]


class QuickCumsum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, interval_ends):
        x = x.cumsum(0)
        ends = x.index_select(0, interval_ends)
        out = torch.cat([ends[:1], ends[1:] - ends[:-1]])
        ctx.save_for_backward(interval_ends)
        ctx.n = x.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (interval_ends,) = ctx.saved_tensors
        # every point takes the gradient of the interval it ends in
        owner = torch.zeros(ctx.n, dtype=torch.long, device=grad_out.device)
        owner[interval_ends[:-1] + 1] = 1
        owner = owner.cumsum(0)
        return grad_out.index_select(0, owner), None


def bev_encoder():
    trunk = torchvision.models.resnet18(weights=None, zero_init_residual=True)
    trunk.conv1 = nn.Conv2d(C, 64, 7, 2, 3, bias=False)
    return trunk


class BevEncode(nn.Module):
    def __init__(self):
        super().__init__()
        t = bev_encoder()
        self.conv1, self.bn1, self.relu = t.conv1, t.bn1, t.relu
        self.layer1, self.layer2, self.layer3 = t.layer1, t.layer2, t.layer3
        self.up1 = nn.Sequential(nn.Conv2d(64 + 256, 256, 3, padding=1, bias=False), nn.BatchNorm2d(256),
                                 nn.ReLU(inplace=True), nn.Conv2d(256, 256, 3, padding=1, bias=False),
                                 nn.BatchNorm2d(256), nn.ReLU(inplace=True))
        self.up2 = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
                                 nn.Conv2d(256, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128),
                                 nn.ReLU(inplace=True), nn.Conv2d(128, 1, 1))

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x1 = self.layer1(x)
        x = self.layer3(self.layer2(x1))
        x = F.interpolate(x, scale_factor=4, mode="bilinear", align_corners=True)
        return self.up2(self.up1(torch.cat([x1, x], dim=1)))


def make_geometry(bsz):
    """Fixed camera geometry: frustum point -> BEV cell, computed once on the CPU."""
    g = torch.Generator().manual_seed(7)
    npts = NCAM * D * FH * FW
    cell = torch.randint(0, BX * BY, (bsz, npts), generator=g)
    keep = torch.rand(bsz, npts, generator=g) > 0.05
    batch_ix = torch.arange(bsz)[:, None].expand(bsz, npts)
    point_ix = torch.arange(bsz * npts).view(bsz, npts)
    cell, batch_ix, point_ix = cell[keep], batch_ix[keep], point_ix[keep]
    ranks = batch_ix * (BX * BY) + cell
    order = ranks.argsort()
    ranks, point_ix = ranks[order], point_ix[order]
    ends = torch.ones_like(ranks, dtype=torch.bool)
    ends[:-1] = ranks[1:] != ranks[:-1]
    interval_ends = ends.nonzero().squeeze(1)
    r = ranks[interval_ends]
    geo = dict(points=point_ix, ends=interval_ends, b=r // (BX * BY), x=(r % (BX * BY)) // BY, y=r % BY)
    return {k: v.to(device) for k, v in geo.items()}


class LiftSplatShoot(nn.Module):
    def __init__(self):
        super().__init__()
        self.camencode = CamEncode()
        self.bevencode = BevEncode()

    def forward(self, imgs, geo, ckpt=False):
        bsz = imgs.shape[0]
        x = imgs.flatten(0, 1)
        if ckpt:
            x = checkpoint(self.camencode, x, use_reentrant=False)
        else:
            x = self.camencode(x)
        # [B*N, C, D, H, W] -> points [B*N*D*H*W, C]
        x = x.view(bsz, NCAM, C, D, FH, FW).permute(0, 1, 3, 4, 5, 2).reshape(-1, C)
        x = x.index_select(0, geo["points"])
        x = QuickCumsum.apply(x, geo["ends"])
        grid = torch.zeros(bsz, BX, BY, C, device=x.device, dtype=x.dtype)
        grid = grid.index_put((geo["b"], geo["x"], geo["y"]), x)
        return self.bevencode(grid.permute(0, 3, 1, 2).contiguous())


model = LiftSplatShoot().to(device)
print("parameters", sum(p.numel() for p in model.parameters()))
B = 4
geo = make_geometry(B)
print("points kept", geo["points"].numel(), "intervals", geo["ends"].numel())
report("model + geometry")

crit = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(2.13, device=device))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-7)
for step in range(3):
    imgs = torch.randn(B, NCAM, 3, IMH, IMW, device=device)
    target = (torch.rand(B, 1, BX, BY, device=device) > 0.9).float()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(imgs, geo, ckpt=True)
        loss = crit(logits.float(), target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    print(f"bf16 ckpt step {step} loss {loss.item():.4f}")
del logits, loss, imgs, target
report("train bf16 checkpointed camera encoder")

model.eval()
geo8 = make_geometry(8)
with torch.inference_mode():
    imgs = torch.randn(8, NCAM, 3, IMH, IMW, device=device)
    target = torch.rand(8, 1, BX, BY, device=device) > 0.9
    pred = model(imgs, geo8).sigmoid() > 0.5
    inter = (pred & target).sum().float()
    union = (pred | target).sum().float()
    print("eval iou", (inter / union.clamp(min=1)).item())
del imgs, target, pred, inter, union, geo8
report("eval inference_mode batch 8")

model.train()
scaler = torch.amp.GradScaler("cuda")
for step in range(3):
    imgs = torch.randn(B, NCAM, 3, IMH, IMW, device=device)
    target = (torch.rand(B, 1, BX, BY, device=device) > 0.9).float()
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(imgs, geo)
        loss = crit(logits.float(), target)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
    print(f"fp16 step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("train fp16 gradscaler")
