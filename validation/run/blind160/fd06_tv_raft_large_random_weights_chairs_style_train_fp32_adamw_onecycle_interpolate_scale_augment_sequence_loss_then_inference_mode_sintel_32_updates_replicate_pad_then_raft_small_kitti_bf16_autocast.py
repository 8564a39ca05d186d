"""torchvision RAFT-large optical flow from random weights (raft_large(weights=None)), trained as
torchvision's references/optical_flow/train.py does on FlyingChairs-style pairs: the all-pairs
correlation volume of 1/8-resolution features with a 4-level pyramid, 12 flow updates of the
convolutional GRU, convex upsampling of every prediction; a spatial augmentation that rescales both
frames and the flow with F.interpolate (bilinear, scale 1.2, the flow multiplied by the scale) and
crops 368 x 496; the sequence loss (gamma 0.8) over valid pixels with flow under 400; fp32, AdamW
lr 4e-4 weight decay 1e-4 eps 1e-8, OneCycleLR (pct_start 0.05, linear), clip_grad_norm_ 1.0,
batch 4, 2 steps (each its own phase); then under inference_mode a Sintel-sized 436 x 1024 pair
padded to 440 x 1024 with F.pad(mode='replicate') through raft_large with 32 updates, the last flow
unpadded, at batch 2; then raft_small from random weights under bf16 autocast on 2 KITTI-sized
375 x 1242 pairs padded to 376 x 1248, 24 updates, the end-point error against a random flow;
5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.optical_flow import raft_large, raft_small

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16006)
if SMALL:
    B, CROP, UPD, SINTEL, S_UPD, KITTI, K_UPD, STEPS = 1, (128, 128), 2, (130, 150), 2, (129, 140), 2, 2
else:
    B, CROP, UPD, SINTEL, S_UPD, KITTI, K_UPD, STEPS = 4, (368, 496), 12, (436, 1024), 32, (375, 1242), 24, 2
SCALE = 1.2
device = "cuda" if torch.cuda.is_available() else "cpu"


class InputPadder:
    """Pads images such that dimensions are divisible by 8 (the references' 'sintel' mode)."""

    def __init__(self, dims, mode="sintel"):
        self.ht, self.wd = dims[-2:]
        pad_ht = (((self.ht // 8) + 1) * 8 - self.ht) % 8
        pad_wd = (((self.wd // 8) + 1) * 8 - self.wd) % 8
        if mode == "sintel":
            self._pad = [pad_wd // 2, pad_wd - pad_wd // 2, pad_ht // 2, pad_ht - pad_ht // 2]
        else:
            self._pad = [pad_wd // 2, pad_wd - pad_wd // 2, 0, pad_ht]

    def pad(self, *inputs):
        return [F.pad(x, self._pad, mode="replicate") for x in inputs]

    def unpad(self, x):
        ht, wd = x.shape[-2:]
        c = [self._pad[2], ht - self._pad[3], self._pad[0], wd - self._pad[1]]
        return x[..., c[0] : c[1], c[2] : c[3]]


def sequence_loss(flow_preds, flow_gt, valid_flow_mask, gamma=0.8, max_flow=400):
    flow_norm = torch.sum(flow_gt**2, dim=1).sqrt()
    valid_flow_mask = valid_flow_mask & (flow_norm < max_flow)
    valid_flow_mask = valid_flow_mask[:, None, :, :]
    flow_preds = torch.stack(flow_preds)
    abs_diff = (flow_preds - flow_gt).abs()
    abs_diff = (abs_diff * valid_flow_mask).mean(axis=(1, 2, 3, 4))
    num_predictions = flow_preds.shape[0]
    weights = gamma ** torch.arange(num_predictions - 1, -1, -1).to(flow_gt.device)
    return (abs_diff * weights).sum()


def augment(img1, img2, flow):
    size = [int(CROP[0] * SCALE), int(CROP[1] * SCALE)]
    img1 = F.interpolate(img1, size=size, mode="bilinear", align_corners=False)
    img2 = F.interpolate(img2, size=size, mode="bilinear", align_corners=False)
    flow = F.interpolate(flow, size=size, mode="bilinear", align_corners=False) * SCALE
    y0, x0 = (size[0] - CROP[0]) // 2, (size[1] - CROP[1]) // 2
    crop = (slice(None), slice(None), slice(y0, y0 + CROP[0]), slice(x0, x0 + CROP[1]))
    return img1[crop], img2[crop], flow[crop]


model = raft_large(weights=None, progress=False).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=1e-4, eps=1e-8)
sched = torch.optim.lr_scheduler.OneCycleLR(
    opt, max_lr=4e-4, total_steps=100, pct_start=0.05, cycle_momentum=False, anneal_strategy="linear"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    img1 = torch.rand(B, 3, *CROP, device=device) * 2 - 1
    img2 = torch.rand(B, 3, *CROP, device=device) * 2 - 1
    flow_gt = torch.randn(B, 2, *CROP, device=device) * 8
    img1, img2, flow_gt = augment(img1, img2, flow_gt)
    valid = torch.ones(B, *CROP, dtype=torch.bool, device=device)
    preds = model(img1, img2, num_flow_updates=UPD)
    loss = sequence_loss(preds, flow_gt, valid)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1)
    opt.step()
    sched.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del preds, loss, img1, img2, flow_gt, valid
model.eval()
with torch.inference_mode():
    img1 = torch.rand(2, 3, *SINTEL, device=device) * 2 - 1
    img2 = torch.rand(2, 3, *SINTEL, device=device) * 2 - 1
    padder = InputPadder(img1.shape)
    img1, img2 = padder.pad(img1, img2)
    flow = padder.unpad(model(img1, img2, num_flow_updates=S_UPD)[-1])
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"sintel flow {tuple(flow.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del flow, img1, img2
small = raft_small(weights=None, progress=False).to(device).eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
    img1 = torch.rand(2, 3, *KITTI, device=device) * 2 - 1
    img2 = torch.rand(2, 3, *KITTI, device=device) * 2 - 1
    padder = InputPadder(img1.shape, mode="kitti")
    img1, img2 = padder.pad(img1, img2)
    flow = padder.unpad(small(img1, img2, num_flow_updates=K_UPD)[-1]).float()
    epe = torch.sum((flow - torch.randn_like(flow)) ** 2, dim=1).sqrt().mean()
if device == "cuda":
    print(
        f"kitti epe {epe.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
