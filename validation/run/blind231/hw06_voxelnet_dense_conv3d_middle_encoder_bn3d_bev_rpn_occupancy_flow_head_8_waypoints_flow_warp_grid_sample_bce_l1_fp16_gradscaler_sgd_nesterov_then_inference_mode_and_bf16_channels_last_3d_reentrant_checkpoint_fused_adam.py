"""A VoxelNet-style (Zhou & Tuzel 2018) dense 3-D middle encoder under an occupancy-flow forecasting head
(Waymo Occupancy and Flow challenge style), written by hand.

Input: a dense voxel grid of 8 features on 40 x 200 x 176 (z, y, x) cells per sample, zeros where empty, as a
dense voxeliser hands it over. A pointwise Conv3d(8, 32, 1) + BatchNorm3d + ReLU as the voxel feature
encoder; the middle encoder is dense Conv3d 3x3x3 + BatchNorm3d + ReLU: 32 -> 32 at full size, 32 -> 64 at
stride 2, 64 -> 64, then 64 -> 64 at stride (2, 1, 1) twice, the 5 remaining z cells folded into 320 BEV
channels. A 2-D RPN (3 conv at 100 x 88, 3 conv at stride 2, ConvTranspose2d back, concat) and an occupancy
flow head predicting, for 8 future waypoints, observed-occupancy and occluded-occupancy logits and a 2-D
flow, upsampled bilinearly to 200 x 176. Losses: BCE-with-logits on both occupancies, L1 on the flow
weighted by the ground-truth occupancy, and a flow-traced loss: the predicted occupancy of waypoint t - 1
warped by the flow of waypoint t with F.grid_sample, BCE (autocast disabled) against the ground truth of
waypoint t.

Phases: 3 steps under fp16 autocast with GradScaler, foreach SGD (momentum 0.9, nesterov) and a
CosineAnnealingLR at batch 4; an inference_mode evaluation under bf16 autocast at batch 8 (sigmoid
occupancies, per-waypoint soft IoU); torch.cuda.empty_cache(), the 3-D encoder in channels_last_3d, 3 steps
under bf16 autocast with the middle encoder under reentrant torch.utils.checkpoint (use_reentrant=True) and
fused Adam at batch 4. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2316)
device = "cuda"
NZ, NY, NX, FV = 40, 200, 176, 8
TW = 8


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def cbr3(cin, cout, stride=1):
    return nn.Sequential(nn.Conv3d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm3d(cout, eps=1e-3, momentum=0.01),
                         nn.ReLU(inplace=True))


def cbr2(cin, cout, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01),
                         nn.ReLU(inplace=True))


class OccFlowNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.vfe = nn.Sequential(nn.Conv3d(FV, 32, 1, bias=False), nn.BatchNorm3d(32), nn.ReLU(inplace=True))
        self.middle = nn.Sequential(cbr3(32, 32), cbr3(32, 64, 2), cbr3(64, 64), cbr3(64, 64, (2, 1, 1)),
                                    cbr3(64, 64, (2, 1, 1)))
        self.block1 = nn.Sequential(cbr2(320, 128), cbr2(128, 128), cbr2(128, 128))
        self.block2 = nn.Sequential(cbr2(128, 256, 2), cbr2(256, 256), cbr2(256, 256))
        self.up1 = nn.Sequential(nn.Conv2d(128, 128, 1, bias=False), nn.BatchNorm2d(128), nn.ReLU(inplace=True))
        self.up2 = nn.Sequential(nn.ConvTranspose2d(256, 128, 2, 2, bias=False), nn.BatchNorm2d(128),
                                 nn.ReLU(inplace=True))
        self.head = nn.Sequential(cbr2(256, 128), nn.Conv2d(128, TW * 4, 1))
        self.ckpt = False

    def forward(self, vox):
        x = self.vfe(vox)
        if self.ckpt:
            x = checkpoint(self.middle, x, use_reentrant=True)
        else:
            x = self.middle(x)
        bsz, c, z, h, w = x.shape
        x = x.reshape(bsz, c * z, h, w)
        x1 = self.block1(x)
        x2 = self.block2(x1)
        x = torch.cat([self.up1(x1), self.up2(x2)], dim=1)
        out = F.interpolate(self.head(x), size=(NY, NX), mode="bilinear", align_corners=False)
        out = out.view(bsz, TW, 4, NY, NX)
        return out[:, :, 0], out[:, :, 1], out[:, :, 2:4]


def base_grid(bsz):
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, NY, device=device), torch.linspace(-1, 1, NX, device=device),
                            indexing="ij")
    return torch.stack([xs, ys], dim=-1).unsqueeze(0).expand(bsz, -1, -1, -1)


def occ_flow_loss(obs, occl, flow, gt_obs, gt_occl, gt_flow):
    obs, occl, flow = obs.float(), occl.float(), flow.float()
    l_obs = F.binary_cross_entropy_with_logits(obs, gt_obs)
    l_occl = F.binary_cross_entropy_with_logits(occl, gt_occl)
    w = gt_obs.unsqueeze(2)
    l_flow = (F.l1_loss(flow, gt_flow, reduction="none") * w).sum() / w.sum().clamp(min=1)
    bsz = obs.shape[0]
    prev = torch.sigmoid(obs[:, :-1]).reshape(bsz * (TW - 1), 1, NY, NX)
    f = flow[:, 1:].permute(0, 1, 3, 4, 2).reshape(bsz * (TW - 1), NY, NX, 2)
    grid = base_grid(bsz * (TW - 1)) + f * torch.tensor([2.0 / NX, 2.0 / NY], device=f.device)
    warped = F.grid_sample(prev, grid, mode="bilinear", padding_mode="zeros", align_corners=True)
    warped = warped.view(bsz, TW - 1, NY, NX).clamp(1e-6, 1 - 1e-6)
    with torch.autocast("cuda", enabled=False):  # binary_cross_entropy refuses autocast
        l_trace = F.binary_cross_entropy(warped, gt_obs[:, 1:])
    return l_obs + l_occl + 0.1 * l_flow + l_trace


def make_batch(bsz):
    vox = torch.randn(bsz, FV, NZ, NY, NX, device=device) * (torch.rand(bsz, 1, NZ, NY, NX, device=device) < 0.05)
    gt_obs = (torch.rand(bsz, TW, NY, NX, device=device) < 0.1).float()
    gt_occl = (torch.rand(bsz, TW, NY, NX, device=device) < 0.05).float()
    gt_flow = torch.randn(bsz, TW, 2, NY, NX, device=device)
    return vox, gt_obs, gt_occl, gt_flow


model = OccFlowNet().to(device)
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4, foreach=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
scaler = torch.amp.GradScaler("cuda")
B = 4
for step in range(3):
    vox, gt_obs, gt_occl, gt_flow = make_batch(B)
    with torch.autocast("cuda", dtype=torch.float16):
        obs, occl, flow = model(vox)
        loss = occ_flow_loss(obs, occl, flow, gt_obs, gt_occl, gt_flow)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    print(f"fp16 step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
del vox, gt_obs, gt_occl, gt_flow, obs, occl, flow, loss
report("train fp16 gradscaler sgd")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    vox, gt_obs, _, _ = make_batch(8)
    obs, occl, flow = model(vox)
    p = torch.sigmoid(obs.float())
    soft_iou = (p * gt_obs).sum((2, 3)) / (p + gt_obs - p * gt_obs).sum((2, 3)).clamp(min=1e-6)
    print("eval soft IoU per waypoint", [round(v, 4) for v in soft_iou.mean(0).tolist()])
del vox, gt_obs, obs, occl, flow, p, soft_iou
report("eval inference_mode bf16 batch 8")

torch.cuda.empty_cache()
model.train()
model.vfe.to(memory_format=torch.channels_last_3d)
model.middle.to(memory_format=torch.channels_last_3d)
model.ckpt = True
opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
for step in range(3):
    vox, gt_obs, gt_occl, gt_flow = make_batch(B)
    vox = vox.contiguous(memory_format=torch.channels_last_3d)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        obs, occl, flow = model(vox)
        loss = occ_flow_loss(obs, occl, flow, gt_obs, gt_occl, gt_flow)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"bf16 ckpt step {step} loss {loss.item():.4f}")
report("train bf16 channels_last_3d reentrant checkpoint")
