"""Video frame interpolation in the style of RIFE (Huang et al., v4): an IFNet of three IFBlocks estimates the
bidirectional intermediate flows F_t->0, F_t->1 and a fusion mask coarse to fine (the inputs bilinearly
downscaled by 4, 2, 1; each block: two stride-2 Conv2d + PReLU, 8 residual Conv2d + PReLU, a
ConvTranspose2d(4, stride 2) head to 5 channels, its output upscaled with F.interpolate and added to the
running flow). Frames are backward-warped with F.grid_sample (bilinear, border padding) over a base grid
cached per shape plus the normalised flow. The target time t in (0, 1) enters as a constant channel. A
privileged teacher block sees the ground-truth frame as well and its flow is distilled into the student
where the teacher's reconstruction is better (a per-pixel mask, no data-dependent shapes). A small
context + U-Net refiner adds a residual to the fused frame.

Loss: Laplacian pyramid L1 (5 levels; Gaussian blur by a depthwise conv2d with groups=3, avg_pool
downsampling, bilinear upsampling) on the student's and the teacher's frames + 0.01 x the masked flow
distillation L1.

Phases: the first step under fp16 autocast with GradScaler (init scale 2^10) and AdamW (batch 32 of
256 x 256 triplets, t random per sample); 3 more steps; 4x interpolation (t = 0.25, 0.5, 0.75) of two
1920 x 1080 frame pairs padded to 1920 x 1088 under torch.inference_mode and fp16 autocast; then the model
in channels_last trained 2 steps under bf16 autocast with a new single-tensor Adam (foreach=False) at
batch 48. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21103)
if SMALL:
    B, RES, H, W, B2, C = 2, 64, 64, 96, 2, 32
else:
    B, RES, H, W, B2, C = 32, 256, 1080, 1920, 48, 96
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


_grids = {}


def warp(img, flow):
    b, _, h, w = flow.shape
    key = (b, h, w, flow.device)
    if key not in _grids:
        gx = torch.linspace(-1.0, 1.0, w, device=flow.device).view(1, 1, 1, w).expand(b, 1, h, w)
        gy = torch.linspace(-1.0, 1.0, h, device=flow.device).view(1, 1, h, 1).expand(b, 1, h, w)
        _grids[key] = torch.cat([gx, gy], dim=1)
    norm = torch.cat([flow[:, 0:1] / ((w - 1.0) / 2.0), flow[:, 1:2] / ((h - 1.0) / 2.0)], dim=1)
    grid = (_grids[key] + norm).permute(0, 2, 3, 1)
    return F.grid_sample(img, grid, mode="bilinear", padding_mode="border", align_corners=True)


def conv(cin, cout, k=3, s=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2), nn.PReLU(cout))


class IFBlock(nn.Module):
    def __init__(self, cin, c):
        super().__init__()
        self.conv0 = nn.Sequential(conv(cin, c // 2, 3, 2), conv(c // 2, c, 3, 2))
        self.convblock = nn.Sequential(*[conv(c, c) for _ in range(8)])
        self.last = nn.ConvTranspose2d(c, 5, 4, 2, 1)

    def forward(self, x, flow, scale):
        x = F.interpolate(x, scale_factor=1.0 / scale, mode="bilinear", align_corners=False)
        if flow is not None:
            f = F.interpolate(flow, scale_factor=1.0 / scale, mode="bilinear", align_corners=False) / scale
            x = torch.cat([x, f], dim=1)
        x = self.conv0(x)
        x = self.convblock(x) + x
        tmp = self.last(x)
        tmp = F.interpolate(tmp, scale_factor=scale * 2, mode="bilinear", align_corners=False)
        return tmp[:, :4] * scale * 2, tmp[:, 4:5]


class Refiner(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.down0 = conv(3 + 3 + 3 + 4 + 1, 2 * c, 3, 2)
        self.down1 = conv(2 * c, 4 * c, 3, 2)
        self.down2 = conv(4 * c, 8 * c, 3, 2)
        self.up1 = nn.Sequential(nn.ConvTranspose2d(8 * c, 4 * c, 4, 2, 1), nn.PReLU(4 * c))
        self.up0 = nn.Sequential(nn.ConvTranspose2d(8 * c, 2 * c, 4, 2, 1), nn.PReLU(2 * c))
        self.out = nn.ConvTranspose2d(4 * c, 3, 4, 2, 1)

    def forward(self, img0, img1, merged, flow, mask):
        d0 = self.down0(torch.cat([img0, img1, merged, flow, mask], dim=1))
        d1 = self.down1(d0)
        d2 = self.down2(d1)
        u1 = self.up1(d2)
        u0 = self.up0(torch.cat([u1, d1], dim=1))
        return torch.tanh(self.out(torch.cat([u0, d0], dim=1))) * 0.5


class IFNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.block0 = IFBlock(7, 2 * C)
        self.block1 = IFBlock(7 + 6 + 1 + 4, C + C // 2)
        self.block2 = IFBlock(7 + 6 + 1 + 4, C)
        self.teacher = IFBlock(7 + 6 + 1 + 3 + 4, C)
        self.refine = Refiner()

    def fuse(self, img0, img1, flow, mask):
        w0, w1 = warp(img0, flow[:, :2]), warp(img1, flow[:, 2:4])
        m = torch.sigmoid(mask)
        return w0, w1, w0 * m + w1 * (1 - m)

    def forward(self, img0, img1, t, gt=None):
        tch = t.view(-1, 1, 1, 1).expand(-1, 1, *img0.shape[2:]).to(img0.dtype)
        flow, mask = self.block0(torch.cat([img0, img1, tch], dim=1), None, 4)
        for blk, scale in ((self.block1, 2), (self.block2, 1)):
            w0, w1, _ = self.fuse(img0, img1, flow, mask)
            df, dm = blk(torch.cat([img0, img1, tch, w0, w1, mask], dim=1), flow, scale)
            flow, mask = flow + df, mask + dm
        w0, w1, merged = self.fuse(img0, img1, flow, mask)
        out = (merged + self.refine(img0, img1, merged, flow, mask)).clamp(0, 1)
        if gt is None:
            return out
        df, dm = self.teacher(torch.cat([img0, img1, tch, w0, w1, mask, gt], dim=1), flow, 1)
        flow_t, mask_t = flow + df, mask + dm
        _, _, merged_t = self.fuse(img0, img1, flow_t, mask_t)
        return out, merged_t, flow, flow_t


def gauss_kernel(dev):
    k = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0], device=dev)
    k = (k[:, None] * k[None]) / 256.0
    return k.expand(3, 1, 5, 5).contiguous()


def lap_loss(x, y, kernel, levels=5):
    loss = 0.0
    for _ in range(levels):
        bx = F.conv2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), kernel.to(x.dtype), groups=3)
        by = F.conv2d(F.pad(y, (2, 2, 2, 2), mode="reflect"), kernel.to(y.dtype), groups=3)
        loss = loss + ((x - bx) - (y - by)).abs().mean()
        x, y = F.avg_pool2d(bx, 2), F.avg_pool2d(by, 2)
    return loss


model = IFNet().to(device)
kernel = gauss_kernel(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10, enabled=amp)
print(f"params {sum(p.numel() for p in model.parameters())}")


def triplet(n):
    frames = torch.rand(n, 3, 3, RES, RES, device=device)
    return frames[:, 0], frames[:, 1], frames[:, 2], torch.rand(n, device=device)


def train_step(n, dtype, use_scaler, channels_last=False):
    img0, gt, img1, t = triplet(n)
    if channels_last:
        img0, gt, img1 = (z.contiguous(memory_format=torch.channels_last) for z in (img0, gt, img1))
    with torch.autocast("cuda", dtype=dtype, enabled=amp):
        out, out_t, flow, flow_t = model(img0, img1, t, gt)
        err_s = (out.float() - gt).abs().mean(1, keepdim=True)
        err_t = (out_t.float() - gt).abs().mean(1, keepdim=True)
        better = (err_s > err_t + 0.01).float().detach()
        distill = ((flow_t.detach().float() - flow.float()).abs() * better).mean()
        loss = lap_loss(out.float(), gt, kernel) + lap_loss(out_t.float(), gt, kernel) + 0.01 * distill
    opt.zero_grad(set_to_none=True)
    if use_scaler:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {train_step(B, torch.float16, True):.4f} scale {scaler.get_scale()}")
report("first step")
for _ in range(3):
    loss = train_step(B, torch.float16, True)
print(f"step 3 loss {loss:.4f} scale {scaler.get_scale()}")
report("train fp16")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    pad_h = (32 - H % 32) % 32
    outs = []
    for _ in range(2):
        img0 = F.pad(torch.rand(1, 3, H, W, device=device), (0, 0, 0, pad_h))
        img1 = F.pad(torch.rand(1, 3, H, W, device=device), (0, 0, 0, pad_h))
        for tt in (0.25, 0.5, 0.75):
            mid = model(img0, img1, torch.full((1,), tt, device=device))
            outs.append((mid[:, :, :H] * 255).round().to(torch.uint8).cpu())
    print(f"interpolated {len(outs)} frames of {tuple(outs[0].shape)}")
report("1080p 4x inference")

model.train()
model = model.to(memory_format=torch.channels_last)
opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
for _ in range(2):
    loss = train_step(B2, torch.bfloat16, False, channels_last=True)
print(f"bf16 channels_last loss {loss:.4f}")
report("bf16 channels_last adam")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
