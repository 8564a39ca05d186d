"""BasicVSR (Chan et al., mmagic's BasicVSRNet) written by hand for x4 video super-resolution, fp32.
SPyNet optical flow: inputs resized to a multiple of 32 (`F.interpolate` bilinear), ImageNet-normalised,
a 6-level `avg_pool2d` pyramid, coarse-to-fine: the flow upsampled x2 (bilinear, align_corners) and
doubled, the supporting frame warped by `flow_warp` (a meshgrid plus the flow, normalised to [-1, 1],
`F.grid_sample` bilinear with border padding), a 5-conv 7x7 basic module on cat(ref, warped, flow),
the residual added; the flow resized back and its two channels rescaled in place. Propagation: flows
between neighbours in both directions over the whole clip (n * (t-1) frame pairs at once), then a
backward pass over the frames (warp the hidden features with the backward flow, cat with the LR frame,
a conv + 15 residual blocks, 64 channels), every frame's feature kept, then a forward pass likewise,
fused with the backward feature (1x1 conv), two conv + `pixel_shuffle(2)` upsamplers, HR convs and the
bilinear x4 upsampled LR frame added; the outputs `torch.stack`ed. Charbonnier loss against synthetic
HR clips (seeded), Adam with a lower learning rate for SPyNet (param groups).
Phase 1: 4 steps at batch 4 x 15 frames of 64 x 64 with SPyNet frozen (`requires_grad_(False)`, as
BasicVSR's first iterations: its Adam state never made). Phase 2: SPyNet unfrozen, 3 more steps (its
Adam state made lazily at the first step that sees its gradients). Phase 3: no_grad inference of one
30-frame 180 x 320 clip to 720 x 1280.
3 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2863)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def flow_warp(x, flow, padding_mode="zeros"):
    _n, _, h, w = x.shape
    gy, gx = torch.meshgrid(
        torch.arange(h, device=x.device, dtype=x.dtype),
        torch.arange(w, device=x.device, dtype=x.dtype),
        indexing="ij",
    )
    vgrid = torch.stack((gx, gy), 2) + flow.permute(0, 2, 3, 1)
    vx = 2.0 * vgrid[..., 0] / max(w - 1, 1) - 1.0
    vy = 2.0 * vgrid[..., 1] / max(h - 1, 1) - 1.0
    return F.grid_sample(
        x, torch.stack((vx, vy), 3), mode="bilinear", padding_mode=padding_mode, align_corners=True
    )


class SPyNet(nn.Module):
    def __init__(self):
        super().__init__()

        def basic():
            layers = []
            for cin, cout in ((8, 32), (32, 64), (64, 32), (32, 16)):
                layers += [nn.Conv2d(cin, cout, 7, 1, 3), nn.ReLU()]
            return nn.Sequential(*layers, nn.Conv2d(16, 2, 7, 1, 3))

        self.basic = nn.ModuleList(basic() for _ in range(6))
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def compute_flow(self, ref, supp):
        n, _, h, w = ref.shape
        ref = [(ref - self.mean) / self.std]
        supp = [(supp - self.mean) / self.std]
        for _ in range(5):
            ref.append(F.avg_pool2d(ref[-1], 2, 2, count_include_pad=False))
            supp.append(F.avg_pool2d(supp[-1], 2, 2, count_include_pad=False))
        ref, supp = ref[::-1], supp[::-1]
        flow = ref[0].new_zeros(n, 2, h // 32, w // 32)
        for level in range(len(ref)):
            up = (
                flow
                if level == 0
                else F.interpolate(flow, scale_factor=2, mode="bilinear", align_corners=True) * 2.0
            )
            flow = up + self.basic[level](
                torch.cat([ref[level], flow_warp(supp[level], up, "border"), up], 1)
            )
        return flow

    def forward(self, ref, supp):
        h, w = ref.shape[2:]
        hu, wu = math.ceil(h / 32) * 32, math.ceil(w / 32) * 32
        ref = F.interpolate(ref, size=(hu, wu), mode="bilinear", align_corners=False)
        supp = F.interpolate(supp, size=(hu, wu), mode="bilinear", align_corners=False)
        flow = F.interpolate(self.compute_flow(ref, supp), size=(h, w), mode="bilinear", align_corners=False)
        flow[:, 0, :, :] *= float(w) / float(wu)
        flow[:, 1, :, :] *= float(h) / float(hu)
        return flow


class ResBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(c, c, 3, 1, 1), nn.Conv2d(c, c, 3, 1, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return x + self.conv2(self.relu(self.conv1(x)))


def resblocks(cin, c=64, n=15):
    return nn.Sequential(
        nn.Conv2d(cin, c, 3, 1, 1), nn.LeakyReLU(0.1, inplace=True), *[ResBlock(c) for _ in range(n)]
    )


class BasicVSR(nn.Module):
    def __init__(self, c=64, n=15):
        super().__init__()
        self.c = c
        self.spynet = SPyNet()
        self.backward_resblocks = resblocks(c + 3, c, n)
        self.forward_resblocks = resblocks(c + 3, c, n)
        self.fusion = nn.Conv2d(2 * c, c, 1)
        self.upconv1 = nn.Conv2d(c, c * 4, 3, 1, 1)
        self.upconv2 = nn.Conv2d(c, 64 * 4, 3, 1, 1)
        self.conv_hr = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv_last = nn.Conv2d(64, 3, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(0.1, inplace=True)

    def forward(self, lrs):
        n, t, c, h, w = lrs.shape
        l1 = lrs[:, :-1].reshape(-1, c, h, w)
        l2 = lrs[:, 1:].reshape(-1, c, h, w)
        flows_backward = self.spynet(l1, l2).view(n, t - 1, 2, h, w)
        flows_forward = self.spynet(l2, l1).view(n, t - 1, 2, h, w)
        outputs = []
        feat = lrs.new_zeros(n, self.c, h, w)
        for i in range(t - 1, -1, -1):
            if i < t - 1:
                feat = flow_warp(feat, flows_backward[:, i])
            feat = self.backward_resblocks(torch.cat([lrs[:, i], feat], 1))
            outputs.append(feat)
        outputs = outputs[::-1]
        feat = torch.zeros_like(feat)
        for i in range(t):
            lr = lrs[:, i]
            if i > 0:
                feat = flow_warp(feat, flows_forward[:, i - 1])
            feat = self.forward_resblocks(torch.cat([lr, feat], 1))
            out = self.lrelu(self.fusion(torch.cat([outputs[i], feat], 1)))
            out = self.lrelu(F.pixel_shuffle(self.upconv1(out), 2))
            out = self.lrelu(F.pixel_shuffle(self.upconv2(out), 2))
            out = self.conv_last(self.lrelu(self.conv_hr(out)))
            out += F.interpolate(lr, scale_factor=4, mode="bilinear", align_corners=False)
            outputs[i] = out
        return torch.stack(outputs, dim=1)


def clip(n, t, h, w):
    hr = torch.rand(n, 1, 3, 4 * h, 4 * w, device=dev)
    shift = torch.arange(t, device=dev).view(1, t, 1, 1, 1)
    hr = (hr + 0.02 * shift + 0.05 * torch.randn(n, t, 3, 4 * h, 4 * w, device=dev)).clamp(0, 1)
    lr = F.interpolate(hr.view(-1, 3, 4 * h, 4 * w), size=(h, w), mode="bicubic", align_corners=False).view(
        n, t, 3, h, w
    )
    return lr.clamp(0, 1), hr


def charbonnier(x, y, eps=1e-12):
    return torch.sqrt((x - y) ** 2 + eps).mean()


model = BasicVSR().to(dev)
spy = list(model.spynet.parameters())
rest = [p for n_, p in model.named_parameters() if not n_.startswith("spynet.")]
opt = torch.optim.Adam([{"params": rest, "lr": 2e-4}, {"params": spy, "lr": 2.5e-5}], betas=(0.9, 0.99))
model.spynet.requires_grad_(False)
for _step in range(4):
    lr, hr = clip(4, 15, 64, 64)
    loss = charbonnier(model(lr), hr)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("frozen-flow loss", round(loss.item(), 5), "adam states", len(opt.state))
report("train_spynet_frozen_15_frames_64px")

model.spynet.requires_grad_(True)
for _step in range(3):
    lr, hr = clip(4, 15, 64, 64)
    loss = charbonnier(model(lr), hr)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("unfrozen loss", round(loss.item(), 5), "adam states", len(opt.state))
report("train_spynet_unfrozen_lazy_adam_state")

del loss, lr, hr
model.eval()
with torch.no_grad():
    lr, _ = clip(1, 30, 180, 320)
    del _
    sr = model(lr).clamp_(0, 1)
print("sr", tuple(sr.shape), round(sr.mean().item(), 4))
report("no_grad_30_frames_180x320_to_720p")
