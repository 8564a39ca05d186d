"""PWC-Net after Sun et al. 2018 ("PWC-Net: CNNs for Optical Flow Using Pyramid, Warping, and Cost
Volume") and NVlabs/PWC-Net's PyTorch PWCDCNet, written by hand: the 6-level feature pyramid (16, 32, 64,
96, 128, 196 channels, three 3 x 3 convolutions a level with LeakyReLU 0.1), the cost volume with a
maximum displacement of 4 (81 channels) computed in plain PyTorch as users do without the CUDA
correlation package (`F.pad` of the second features and 81 shifted products averaged over channels,
`torch.cat`), warping of the second image's features by the upsampled flow through `F.grid_sample` with
the validity mask (a grid_sample of ones, `masked_fill_` below 0.9999), the DenseNet-style decoders
(128, 128, 96, 64, 32 channels concatenated in front), `ConvTranspose2d` upsampling of the flow and of
the features, and the dilated context network (dilations 1, 2, 4, 8, 16, 1). fp32, Adam (lr 1e-4,
weight decay 4e-4) with MultiStepLR, clip_grad_norm_ 10, the multi-scale loss (weights 0.32, 0.08, 0.02,
0.01, 0.005 from level 6 to 2; ground truth scaled by 1/20 and downsampled by area interpolation; the
per-pixel L2 norm summed and divided by the batch); batch 8 of 384 x 448 FlyingChairs crops. Phases:
the model, the first step, 3 more, Sintel-sized evaluation (two pairs of 436 x 1024 resized to 448 x
1024 by bilinear interpolation, the level-2 flow upsampled x4 and rescaled) under no_grad, and
KITTI-sized inference (batch 4 of 375 x 1242 resized to 384 x 1280) in bf16 autocast under
inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17603)
if SMALL:
    B, CROP, STEPS, SINTEL, KITTI, KB = 2, (128, 128), 2, (100, 200), (90, 250), 2
else:
    B, CROP, STEPS, SINTEL, KITTI, KB = 8, (384, 448), 4, (436, 1024), (375, 1242), 4
MD = 4
DIV_FLOW = 20.0
device = "cuda" if torch.cuda.is_available() else "cpu"


def conv(in_planes, out_planes, kernel_size=3, stride=1, padding=1, dilation=1):
    return nn.Sequential(
        nn.Conv2d(
            in_planes,
            out_planes,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            bias=True,
        ),
        nn.LeakyReLU(0.1),
    )


def predict_flow(in_planes):
    return nn.Conv2d(in_planes, 2, kernel_size=3, stride=1, padding=1, bias=True)


def deconv(in_planes, out_planes, kernel_size=4, stride=2, padding=1):
    return nn.ConvTranspose2d(in_planes, out_planes, kernel_size, stride, padding, bias=True)


def correlate(f1, f2, md=MD):
    _, _, H, W = f1.shape
    f2p = F.pad(f2, [md, md, md, md])
    cv = []
    for i in range(2 * md + 1):
        for j in range(2 * md + 1):
            cv.append((f1 * f2p[:, :, i : i + H, j : j + W]).mean(dim=1, keepdim=True))
    return torch.cat(cv, dim=1)


class PWCDCNet(nn.Module):
    def __init__(self, md=4):
        super().__init__()
        self.conv1a = conv(3, 16, kernel_size=3, stride=2)
        self.conv1aa = conv(16, 16, kernel_size=3, stride=1)
        self.conv1b = conv(16, 16, kernel_size=3, stride=1)
        self.conv2a = conv(16, 32, kernel_size=3, stride=2)
        self.conv2aa = conv(32, 32, kernel_size=3, stride=1)
        self.conv2b = conv(32, 32, kernel_size=3, stride=1)
        self.conv3a = conv(32, 64, kernel_size=3, stride=2)
        self.conv3aa = conv(64, 64, kernel_size=3, stride=1)
        self.conv3b = conv(64, 64, kernel_size=3, stride=1)
        self.conv4a = conv(64, 96, kernel_size=3, stride=2)
        self.conv4aa = conv(96, 96, kernel_size=3, stride=1)
        self.conv4b = conv(96, 96, kernel_size=3, stride=1)
        self.conv5a = conv(96, 128, kernel_size=3, stride=2)
        self.conv5aa = conv(128, 128, kernel_size=3, stride=1)
        self.conv5b = conv(128, 128, kernel_size=3, stride=1)
        self.conv6aa = conv(128, 196, kernel_size=3, stride=2)
        self.conv6a = conv(196, 196, kernel_size=3, stride=1)
        self.conv6b = conv(196, 196, kernel_size=3, stride=1)
        self.leakyRELU = nn.LeakyReLU(0.1)

        nd = (2 * md + 1) ** 2
        dd = [128, 256, 352, 416, 448]
        od = nd
        self.conv6_0 = conv(od, 128)
        self.conv6_1 = conv(od + dd[0], 128)
        self.conv6_2 = conv(od + dd[1], 96)
        self.conv6_3 = conv(od + dd[2], 64)
        self.conv6_4 = conv(od + dd[3], 32)
        self.predict_flow6 = predict_flow(od + dd[4])
        self.deconv6 = deconv(2, 2)
        self.upfeat6 = deconv(od + dd[4], 2)
        for lvl, c in ((5, 128), (4, 96), (3, 64), (2, 32)):
            od = nd + c + 4
            setattr(self, f"conv{lvl}_0", conv(od, 128))
            setattr(self, f"conv{lvl}_1", conv(od + dd[0], 128))
            setattr(self, f"conv{lvl}_2", conv(od + dd[1], 96))
            setattr(self, f"conv{lvl}_3", conv(od + dd[2], 64))
            setattr(self, f"conv{lvl}_4", conv(od + dd[3], 32))
            setattr(self, f"predict_flow{lvl}", predict_flow(od + dd[4]))
            if lvl > 2:
                setattr(self, f"deconv{lvl}", deconv(2, 2))
                setattr(self, f"upfeat{lvl}", deconv(od + dd[4], 2))
        self.dc_conv1 = conv(od + dd[4], 128, kernel_size=3, stride=1, padding=1, dilation=1)
        self.dc_conv2 = conv(128, 128, kernel_size=3, stride=1, padding=2, dilation=2)
        self.dc_conv3 = conv(128, 128, kernel_size=3, stride=1, padding=4, dilation=4)
        self.dc_conv4 = conv(128, 96, kernel_size=3, stride=1, padding=8, dilation=8)
        self.dc_conv5 = conv(96, 64, kernel_size=3, stride=1, padding=16, dilation=16)
        self.dc_conv6 = conv(64, 32, kernel_size=3, stride=1, padding=1, dilation=1)
        self.dc_conv7 = predict_flow(32)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.kaiming_normal_(m.weight.data, mode="fan_in")
                if m.bias is not None:
                    m.bias.data.zero_()

    def warp(self, x, flo):
        B, _, H, W = x.size()
        xx = torch.arange(0, W, device=x.device).view(1, -1).repeat(H, 1)
        yy = torch.arange(0, H, device=x.device).view(-1, 1).repeat(1, W)
        xx = xx.view(1, 1, H, W).repeat(B, 1, 1, 1)
        yy = yy.view(1, 1, H, W).repeat(B, 1, 1, 1)
        grid = torch.cat((xx, yy), 1).float()
        vgrid = grid + flo
        vgrid[:, 0, :, :] = 2.0 * vgrid[:, 0, :, :].clone() / max(W - 1, 1) - 1.0
        vgrid[:, 1, :, :] = 2.0 * vgrid[:, 1, :, :].clone() / max(H - 1, 1) - 1.0
        vgrid = vgrid.permute(0, 2, 3, 1)
        output = F.grid_sample(x, vgrid, align_corners=True)
        mask = torch.ones(x.size(), device=x.device, dtype=x.dtype)
        mask = F.grid_sample(mask, vgrid, align_corners=True)
        mask = mask.masked_fill(mask < 0.9999, 0)
        mask = mask.masked_fill(mask > 0, 1)
        return output * mask

    def decode(self, lvl, c1, c2, up_flow, up_feat, scale):
        warped = self.warp(c2, up_flow * scale)
        corr = self.leakyRELU(correlate(c1, warped))
        x = torch.cat((corr, c1, up_flow, up_feat), 1)
        for k in range(5):
            x = torch.cat((getattr(self, f"conv{lvl}_{k}")(x), x), 1)
        return getattr(self, f"predict_flow{lvl}")(x), x

    def forward(self, im1, im2):
        c11 = self.conv1b(self.conv1aa(self.conv1a(im1)))
        c21 = self.conv1b(self.conv1aa(self.conv1a(im2)))
        c12 = self.conv2b(self.conv2aa(self.conv2a(c11)))
        c22 = self.conv2b(self.conv2aa(self.conv2a(c21)))
        c13 = self.conv3b(self.conv3aa(self.conv3a(c12)))
        c23 = self.conv3b(self.conv3aa(self.conv3a(c22)))
        c14 = self.conv4b(self.conv4aa(self.conv4a(c13)))
        c24 = self.conv4b(self.conv4aa(self.conv4a(c23)))
        c15 = self.conv5b(self.conv5aa(self.conv5a(c14)))
        c25 = self.conv5b(self.conv5aa(self.conv5a(c24)))
        c16 = self.conv6b(self.conv6a(self.conv6aa(c15)))
        c26 = self.conv6b(self.conv6a(self.conv6aa(c25)))

        corr6 = self.leakyRELU(correlate(c16, c26))
        x = torch.cat((self.conv6_0(corr6), corr6), 1)
        x = torch.cat((self.conv6_1(x), x), 1)
        x = torch.cat((self.conv6_2(x), x), 1)
        x = torch.cat((self.conv6_3(x), x), 1)
        x = torch.cat((self.conv6_4(x), x), 1)
        flow6 = self.predict_flow6(x)
        up_flow6 = self.deconv6(flow6)
        up_feat6 = self.upfeat6(x)

        flow5, x = self.decode(5, c15, c25, up_flow6, up_feat6, 0.625)
        up_flow5, up_feat5 = self.deconv5(flow5), self.upfeat5(x)
        flow4, x = self.decode(4, c14, c24, up_flow5, up_feat5, 1.25)
        up_flow4, up_feat4 = self.deconv4(flow4), self.upfeat4(x)
        flow3, x = self.decode(3, c13, c23, up_flow4, up_feat4, 2.5)
        up_flow3, up_feat3 = self.deconv3(flow3), self.upfeat3(x)
        flow2, x = self.decode(2, c12, c22, up_flow3, up_feat3, 5.0)

        x = self.dc_conv4(self.dc_conv3(self.dc_conv2(self.dc_conv1(x))))
        flow2 = flow2 + self.dc_conv7(self.dc_conv6(self.dc_conv5(x)))
        if self.training:
            return flow2, flow3, flow4, flow5, flow6
        return flow2


def multiscale_loss(flows, target, weights=(0.005, 0.01, 0.02, 0.08, 0.32)):
    target = target / DIV_FLOW
    loss = 0.0
    for flow, w in zip(flows, weights, strict=True):
        t = F.interpolate(target, size=flow.shape[-2:], mode="area")
        loss = loss + w * torch.norm(flow - t, p=2, dim=1).sum() / flow.shape[0]
    return loss


def image_pair(n, h, w):
    image1 = torch.rand(n, 3, h, w, device=device)
    flow = torch.randn(n, 2, h, w, device=device) * 4.0
    image2 = (image1 + 0.05 * torch.randn(n, 3, h, w, device=device)).clamp(0.0, 1.0)
    return image1, image2, flow


model = PWCDCNet(md=MD).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.999), weight_decay=4e-4)
scheduler = torch.optim.lr_scheduler.MultiStepLR(
    optimizer, milestones=[400000, 600000, 800000, 1000000], gamma=0.5
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    im1, im2, flow_gt = image_pair(B, *CROP)
    flows = model(im1, im2)
    loss = multiscale_loss(flows, flow_gt)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    scheduler.step()
    epe = torch.norm(
        DIV_FLOW * F.interpolate(flows[0].detach(), scale_factor=4, mode="bilinear") - flow_gt, 2, 1
    )
    print(f"step {step} loss {loss.item():.3f} epe {epe.mean().item():.3f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del im1, im2, flow_gt, flows, loss, epe
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def estimate(im1, im2):
    H, W = im1.shape[-2:]
    H_, W_ = (H + 63) // 64 * 64, (W + 63) // 64 * 64
    a = F.interpolate(im1, size=(H_, W_), mode="bilinear", align_corners=False)
    b = F.interpolate(im2, size=(H_, W_), mode="bilinear", align_corners=False)
    flow = model(a, b)
    flow = DIV_FLOW * F.interpolate(flow.float(), size=(H, W), mode="bilinear", align_corners=False)
    scale = torch.tensor([W / W_, H / H_], device=flow.device).view(1, 2, 1, 1)
    return flow * scale


model.eval()
epes = []
with torch.no_grad():
    for _ in range(2):
        im1, im2, flow_gt = image_pair(1, *SINTEL)
        flow = estimate(im1, im2)
        epes.append(torch.norm(flow - flow_gt, 2, 1).mean())
    sintel = torch.stack(epes).mean()
print(f"sintel epe {sintel.item():.3f}")
del im1, im2, flow_gt, flow, epes
if device == "cuda":
    print(f"sintel peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    im1, im2, flow_gt = image_pair(KB, *KITTI)
    flow = estimate(im1, im2)
    epe = torch.norm(flow - flow_gt, 2, 1)
    mag = torch.norm(flow_gt, 2, 1)
    f1 = ((epe > 3.0) & (epe / mag > 0.05)).float().mean()
print(f"kitti epe {epe.mean().item():.3f} f1 {100 * f1.item():.2f} {tuple(flow.shape)} {flow.dtype}")
if device == "cuda":
    print(f"kitti peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
