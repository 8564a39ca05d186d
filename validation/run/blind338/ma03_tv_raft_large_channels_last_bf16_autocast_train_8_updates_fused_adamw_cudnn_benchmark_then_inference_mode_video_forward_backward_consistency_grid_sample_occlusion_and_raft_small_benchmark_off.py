"""Optical flow with torchvision's RAFT models from random weights (no downloads), fixed flow updates.

torch.backends.cudnn.benchmark is True for phases 1-4 and set False before phase 5.

1. Set-up: raft_large(weights=None) moved to the GPU in torch.channels_last, AdamW(fused=True, lr 2e-4,
   wd 5e-5), cudnn.benchmark on.
2. First training step: batch 6 of 288 x 384 frame pairs in channels_last under bf16 autocast, 8 flow updates,
   the sequence loss (gamma 0.85) over pixels whose flow is under 400, clip_grad_norm_ 1.0.
3. A second step.
4. Under torch.inference_mode in fp32: a 9-frame clip at 256 x 448, the 8 forward pairs and the 8 backward
   pairs batched as 16 pairs through raft_large with 12 updates; the backward flow warped onto the forward
   one with F.grid_sample (bilinear, border padding) for a forward-backward consistency (occlusion) mask, and
   the forward flows turned into RGB with torchvision.utils.flow_to_image.
5. raft_small(weights=None) in channels_last, cudnn.benchmark off, under inference_mode and bf16 autocast on
   4 pairs at 520 x 960, 20 updates, the end-point error against a random flow.

Phases: set-up; first step; second step; raft_large video consistency; raft_small. 5 phases."""

import os

import torch
import torch.nn.functional as F
from torchvision.models.optical_flow import raft_large, raft_small
from torchvision.utils import flow_to_image

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(33803)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
torch.backends.cudnn.benchmark = True
if SMALL:
    B, CROP, UPD, FRAMES, VID, V_UPD, SM_B, SM_HW, SM_UPD = (
        1,
        (128, 128),
        2,
        3,
        (128, 128),
        2,
        1,
        (128, 128),
        2,
    )
else:
    B, CROP, UPD, FRAMES, VID, V_UPD, SM_B, SM_HW, SM_UPD = (
        6,
        (288, 384),
        8,
        9,
        (256, 448),
        12,
        4,
        (520, 960),
        20,
    )
CL = torch.channels_last


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


def sequence_loss(flow_preds, flow_gt, valid, gamma=0.85, max_flow=400):
    mag = flow_gt.pow(2).sum(1).sqrt()
    valid = (valid & (mag < max_flow))[:, None]
    n = len(flow_preds)
    loss = flow_gt.new_zeros(())
    for i, pred in enumerate(flow_preds):
        loss = loss + gamma ** (n - i - 1) * ((pred.float() - flow_gt).abs() * valid).mean()
    return loss


model = raft_large(weights=None, progress=False).to(device, memory_format=CL)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=5e-5, eps=1e-8, fused=amp)
report("setup")


def train_step(model, opt):
    model.train()
    img1 = (torch.rand(B, 3, *CROP, device=device) * 2 - 1).contiguous(memory_format=CL)
    img2 = (torch.rand(B, 3, *CROP, device=device) * 2 - 1).contiguous(memory_format=CL)
    flow_gt = torch.randn(B, 2, *CROP, device=device) * 8
    valid = torch.rand(B, *CROP, device=device) > 0.05
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        preds = model(img1, img2, num_flow_updates=UPD)
    loss = sequence_loss(preds, flow_gt, valid)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.detach()


loss = train_step(model, opt)
print(f"step 0 loss {loss.item():.4f}")
report("first step")
loss = train_step(model, opt)
print(f"step 1 loss {loss.item():.4f}")
report("second step")


def warp(x, flow):
    _, _, h, w = flow.shape
    ys, xs = torch.meshgrid(
        torch.arange(h, device=device, dtype=torch.float32),
        torch.arange(w, device=device, dtype=torch.float32),
        indexing="ij",
    )
    gx = 2 * (xs + flow[:, 0]) / (w - 1) - 1
    gy = 2 * (ys + flow[:, 1]) / (h - 1) - 1
    grid = torch.stack([gx, gy], dim=-1)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)


model.eval()
with torch.inference_mode():
    video = torch.rand(FRAMES, 3, *VID, device=device) * 2 - 1
    first = torch.cat([video[:-1], video[1:]]).contiguous(memory_format=CL)
    second = torch.cat([video[1:], video[:-1]]).contiguous(memory_format=CL)
    flows = model(first, second, num_flow_updates=V_UPD)[-1]
    fwd, bwd = flows.chunk(2)
    bwd_warped = warp(bwd, fwd)
    diff = (fwd + bwd_warped).pow(2).sum(1)
    bound = 0.01 * (fwd.pow(2).sum(1) + bwd_warped.pow(2).sum(1)) + 0.5
    occluded = diff > bound
    rgb = flow_to_image(fwd).cpu()
print(f"video flows {tuple(rgb.shape)}, occluded pixels {occluded.sum().item()}")
report("raft_large video consistency")

del model, opt, video, first, second, flows, fwd, bwd, bwd_warped, diff, bound, occluded
torch.backends.cudnn.benchmark = False
small = raft_small(weights=None, progress=False).to(device, memory_format=CL).eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    img1 = torch.rand(SM_B, 3, *SM_HW, device=device).contiguous(memory_format=CL)
    img2 = torch.rand(SM_B, 3, *SM_HW, device=device).contiguous(memory_format=CL)
    flow = small(img1, img2, num_flow_updates=SM_UPD)[-1]
    gt = torch.randn(SM_B, 2, *SM_HW, device=device)
    epe = (flow.float() - gt).pow(2).sum(1).sqrt().mean()
print(f"raft_small epe {epe.item():.3f}")
if device == "cuda":
    print(f"raft_small peak {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
