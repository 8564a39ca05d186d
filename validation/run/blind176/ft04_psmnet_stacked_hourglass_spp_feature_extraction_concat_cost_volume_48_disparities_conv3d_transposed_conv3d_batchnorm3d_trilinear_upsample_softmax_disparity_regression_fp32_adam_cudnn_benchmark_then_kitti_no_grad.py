"""PSMNet after Chang and Chen 2018 ("Pyramid Stereo Matching Network") and the JiaRenChang/PSMNet
repository (models/submodule.py and stackhourglass.py, main.py, finetune.py, Test_img.py), written by
hand: the feature extraction (three 3 x 3 convbn layers, 3 + 16 + 3 + 3 BasicBlocks with a dilated last
stage, and the SPP module of four `nn.AvgPool2d` branches (64, 32, 16, 8) upsampled back bilinearly and
concatenated into 320 channels, then 32-channel features at 1/4 resolution), the concatenation cost
volume (B, 64, maxdisp/4 = 48, H/4, W/4) filled slice by slice from the left and shifted right features,
the stacked-hourglass 3-D CNN (`Conv3d` + `BatchNorm3d`, strided downsampling, `ConvTranspose3d`
upsampling with output_padding, the pre/post skip connections of three hourglasses, three
classification heads), trilinear upsampling of each cost to (192, H, W) by `F.interpolate`, softmax
over disparities and the soft-argmin disparity regression, and the training loss 0.5 / 0.7 / 1.0
smooth L1 of the three outputs over valid pixels (a float mask of disparities below 192). fp32 with
`torch.backends.cudnn.benchmark = True` as main.py sets it, Adam (lr 1e-3, betas 0.9 / 0.999), batch 4 of
256 x 512 SceneFlow crops. Phases: the model, the first training step, 2 more, KITTI-sized testing
under no_grad (two 368 x 1232 pairs padded at the top and right to 384 x 1248, the prediction cropped
back, the D1 error), and SceneFlow-sized validation (batch 2 of 540 x 960 padded to 544 x 960, EPE)
under inference_mode; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17604)
if SMALL:
    MAXDISP, B, CROP, STEPS, KITTI, SF, SFB = 48, 1, (64, 128), 2, (60, 150), (70, 128), 1
else:
    MAXDISP, B, CROP, STEPS, KITTI, SF, SFB = 192, 4, (256, 512), 3, (368, 1232), (540, 960), 2
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cudnn.benchmark = True


def convbn(in_planes, out_planes, kernel_size, stride, pad, dilation):
    return nn.Sequential(
        nn.Conv2d(
            in_planes,
            out_planes,
            kernel_size=kernel_size,
            stride=stride,
            padding=dilation if dilation > 1 else pad,
            dilation=dilation,
            bias=False,
        ),
        nn.BatchNorm2d(out_planes),
    )


def convbn_3d(in_planes, out_planes, kernel_size, stride, pad):
    return nn.Sequential(
        nn.Conv3d(in_planes, out_planes, kernel_size=kernel_size, padding=pad, stride=stride, bias=False),
        nn.BatchNorm3d(out_planes),
    )


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride, downsample, pad, dilation):
        super().__init__()
        self.conv1 = nn.Sequential(convbn(inplanes, planes, 3, stride, pad, dilation), nn.ReLU(inplace=True))
        self.conv2 = convbn(planes, planes, 3, 1, pad, dilation)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        out = self.conv1(x)
        out = self.conv2(out)
        if self.downsample is not None:
            x = self.downsample(x)
        out += x
        return out


class disparityregression(nn.Module):
    def __init__(self, maxdisp):
        super().__init__()
        self.register_buffer("disp", torch.arange(maxdisp, dtype=torch.float32).view(1, maxdisp, 1, 1))

    def forward(self, x):
        return torch.sum(x * self.disp.data, 1, keepdim=True)


class feature_extraction(nn.Module):
    def __init__(self):
        super().__init__()
        self.inplanes = 32
        self.firstconv = nn.Sequential(
            convbn(3, 32, 3, 2, 1, 1),
            nn.ReLU(inplace=True),
            convbn(32, 32, 3, 1, 1, 1),
            nn.ReLU(inplace=True),
            convbn(32, 32, 3, 1, 1, 1),
            nn.ReLU(inplace=True),
        )
        self.layer1 = self._make_layer(BasicBlock, 32, 3, 1, 1, 1)
        self.layer2 = self._make_layer(BasicBlock, 64, 16, 2, 1, 1)
        self.layer3 = self._make_layer(BasicBlock, 128, 3, 1, 1, 1)
        self.layer4 = self._make_layer(BasicBlock, 128, 3, 1, 1, 2)
        pools = (16, 8, 4, 2) if SMALL else (64, 32, 16, 8)
        self.branch1 = nn.Sequential(
            nn.AvgPool2d(pools[0], stride=pools[0]), convbn(128, 32, 1, 1, 0, 1), nn.ReLU(inplace=True)
        )
        self.branch2 = nn.Sequential(
            nn.AvgPool2d(pools[1], stride=pools[1]), convbn(128, 32, 1, 1, 0, 1), nn.ReLU(inplace=True)
        )
        self.branch3 = nn.Sequential(
            nn.AvgPool2d(pools[2], stride=pools[2]), convbn(128, 32, 1, 1, 0, 1), nn.ReLU(inplace=True)
        )
        self.branch4 = nn.Sequential(
            nn.AvgPool2d(pools[3], stride=pools[3]), convbn(128, 32, 1, 1, 0, 1), nn.ReLU(inplace=True)
        )
        self.lastconv = nn.Sequential(
            convbn(320, 128, 3, 1, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(128, 32, kernel_size=1, padding=0, stride=1, bias=False),
        )

    def _make_layer(self, block, planes, blocks, stride, pad, dilation):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample, pad, dilation)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, 1, None, pad, dilation))
        return nn.Sequential(*layers)

    def forward(self, x):
        output = self.firstconv(x)
        output = self.layer1(output)
        output_raw = self.layer2(output)
        output = self.layer3(output_raw)
        output_skip = self.layer4(output)
        size = (output_skip.size()[2], output_skip.size()[3])
        output_branch1 = F.interpolate(self.branch1(output_skip), size, mode="bilinear", align_corners=False)
        output_branch2 = F.interpolate(self.branch2(output_skip), size, mode="bilinear", align_corners=False)
        output_branch3 = F.interpolate(self.branch3(output_skip), size, mode="bilinear", align_corners=False)
        output_branch4 = F.interpolate(self.branch4(output_skip), size, mode="bilinear", align_corners=False)
        output_feature = torch.cat(
            (output_raw, output_skip, output_branch4, output_branch3, output_branch2, output_branch1), 1
        )
        return self.lastconv(output_feature)


class hourglass(nn.Module):
    def __init__(self, inplanes):
        super().__init__()
        self.conv1 = nn.Sequential(
            convbn_3d(inplanes, inplanes * 2, kernel_size=3, stride=2, pad=1), nn.ReLU(inplace=True)
        )
        self.conv2 = convbn_3d(inplanes * 2, inplanes * 2, kernel_size=3, stride=1, pad=1)
        self.conv3 = nn.Sequential(
            convbn_3d(inplanes * 2, inplanes * 2, kernel_size=3, stride=2, pad=1), nn.ReLU(inplace=True)
        )
        self.conv4 = nn.Sequential(
            convbn_3d(inplanes * 2, inplanes * 2, kernel_size=3, stride=1, pad=1), nn.ReLU(inplace=True)
        )
        self.conv5 = nn.Sequential(
            nn.ConvTranspose3d(
                inplanes * 2, inplanes * 2, kernel_size=3, padding=1, output_padding=1, stride=2, bias=False
            ),
            nn.BatchNorm3d(inplanes * 2),
        )
        self.conv6 = nn.Sequential(
            nn.ConvTranspose3d(
                inplanes * 2, inplanes, kernel_size=3, padding=1, output_padding=1, stride=2, bias=False
            ),
            nn.BatchNorm3d(inplanes),
        )

    def forward(self, x, presqu, postsqu):
        out = self.conv1(x)
        pre = self.conv2(out)
        if postsqu is not None:
            pre = F.relu(pre + postsqu, inplace=True)
        else:
            pre = F.relu(pre, inplace=True)
        out = self.conv3(pre)
        out = self.conv4(out)
        if presqu is not None:
            post = F.relu(self.conv5(out) + presqu, inplace=True)
        else:
            post = F.relu(self.conv5(out) + pre, inplace=True)
        out = self.conv6(post)
        return out, pre, post


class PSMNet(nn.Module):
    def __init__(self, maxdisp):
        super().__init__()
        self.maxdisp = maxdisp
        self.feature_extraction = feature_extraction()
        self.dres0 = nn.Sequential(
            convbn_3d(64, 32, 3, 1, 1),
            nn.ReLU(inplace=True),
            convbn_3d(32, 32, 3, 1, 1),
            nn.ReLU(inplace=True),
        )
        self.dres1 = nn.Sequential(
            convbn_3d(32, 32, 3, 1, 1), nn.ReLU(inplace=True), convbn_3d(32, 32, 3, 1, 1)
        )
        self.dres2 = hourglass(32)
        self.dres3 = hourglass(32)
        self.dres4 = hourglass(32)
        self.classif1 = nn.Sequential(
            convbn_3d(32, 32, 3, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv3d(32, 1, kernel_size=3, padding=1, stride=1, bias=False),
        )
        self.classif2 = nn.Sequential(
            convbn_3d(32, 32, 3, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv3d(32, 1, kernel_size=3, padding=1, stride=1, bias=False),
        )
        self.classif3 = nn.Sequential(
            convbn_3d(32, 32, 3, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv3d(32, 1, kernel_size=3, padding=1, stride=1, bias=False),
        )
        self.regression = disparityregression(maxdisp)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2.0 / n))
            elif isinstance(m, nn.Conv3d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.kernel_size[2] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2.0 / n))
            elif isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def forward(self, left, right):
        refimg_fea = self.feature_extraction(left)
        targetimg_fea = self.feature_extraction(right)
        c = refimg_fea.size()[1]
        cost = torch.zeros(
            refimg_fea.size()[0],
            c * 2,
            self.maxdisp // 4,
            refimg_fea.size()[2],
            refimg_fea.size()[3],
            device=left.device,
        )
        for i in range(self.maxdisp // 4):
            if i > 0:
                cost[:, :c, i, :, i:] = refimg_fea[:, :, :, i:]
                cost[:, c:, i, :, i:] = targetimg_fea[:, :, :, :-i]
            else:
                cost[:, :c, i, :, :] = refimg_fea
                cost[:, c:, i, :, :] = targetimg_fea
        cost = cost.contiguous()

        cost0 = self.dres0(cost)
        cost0 = self.dres1(cost0) + cost0
        out1, pre1, post1 = self.dres2(cost0, None, None)
        out1 = out1 + cost0
        out2, _pre2, post2 = self.dres3(out1, pre1, post1)
        out2 = out2 + cost0
        out3, _pre3, _post3 = self.dres4(out2, pre1, post2)
        out3 = out3 + cost0
        cost1 = self.classif1(out1)
        cost2 = self.classif2(out2) + cost1
        cost3 = self.classif3(out3) + cost2
        size = [self.maxdisp, left.size()[2], left.size()[3]]
        if self.training:
            cost1 = torch.squeeze(F.interpolate(cost1, size, mode="trilinear", align_corners=False), 1)
            pred1 = self.regression(F.softmax(cost1, dim=1))
            cost2 = torch.squeeze(F.interpolate(cost2, size, mode="trilinear", align_corners=False), 1)
            pred2 = self.regression(F.softmax(cost2, dim=1))
        cost3 = torch.squeeze(F.interpolate(cost3, size, mode="trilinear", align_corners=False), 1)
        pred3 = self.regression(F.softmax(cost3, dim=1))
        if self.training:
            return pred1, pred2, pred3
        return pred3


def stereo_pair(n, h, w):
    left = torch.randn(n, 3, h, w, device=device)
    right = torch.randn(n, 3, h, w, device=device)
    disp = torch.rand(n, h, w, device=device) * MAXDISP * 1.1
    return left, right, disp


def masked_smooth_l1(pred, target, mask):
    return (F.smooth_l1_loss(pred, target, reduction="none") * mask).sum() / mask.sum()


model = PSMNet(MAXDISP).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.Adam(model.parameters(), lr=0.001, betas=(0.9, 0.999))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    imgL, imgR, disp_true = stereo_pair(B, *CROP)
    mask = (disp_true < MAXDISP).float()
    optimizer.zero_grad()
    output1, output2, output3 = model(imgL, imgR)
    output1 = torch.squeeze(output1, 1)
    output2 = torch.squeeze(output2, 1)
    output3 = torch.squeeze(output3, 1)
    loss = (
        0.5 * masked_smooth_l1(output1, disp_true, mask)
        + 0.7 * masked_smooth_l1(output2, disp_true, mask)
        + masked_smooth_l1(output3, disp_true, mask)
    )
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del imgL, imgR, disp_true, mask, output1, output2, output3, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
d1s = []
with torch.no_grad():
    for _ in range(2):
        imgL, imgR, disp_true = stereo_pair(1, *KITTI)
        top_pad = (KITTI[0] // 16 + 1) * 16 - KITTI[0] if KITTI[0] % 16 else 0
        right_pad = (KITTI[1] // 16 + 1) * 16 - KITTI[1] if KITTI[1] % 16 else 0
        imgL = F.pad(imgL, (0, right_pad, top_pad, 0))
        imgR = F.pad(imgR, (0, right_pad, top_pad, 0))
        output = torch.squeeze(model(imgL, imgR), 1)
        pred_disp = output[:, top_pad:, : output.shape[-1] - right_pad]
        err = (pred_disp - disp_true).abs()
        valid = (disp_true > 0).float()
        bad = ((err > 3) & (err > 0.05 * disp_true)).float()
        d1s.append((bad * valid).sum() / valid.sum())
    d1 = torch.stack(d1s).mean()
print(f"kitti D1 {100 * d1.item():.2f}%")
del imgL, imgR, disp_true, output, pred_disp, err, valid, bad, d1s
if device == "cuda":
    print(f"kitti peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    imgL, imgR, disp_true = stereo_pair(SFB, *SF)
    pad_h = (16 - SF[0] % 16) % 16
    imgL = F.pad(imgL, (0, 0, pad_h, 0))
    imgR = F.pad(imgR, (0, 0, pad_h, 0))
    output = torch.squeeze(model(imgL, imgR), 1)[:, pad_h:, :]
    mask = (disp_true < MAXDISP).float()
    epe = ((output - disp_true).abs() * mask).sum() / mask.sum()
print(f"sceneflow epe {epe.item():.3f}")
if device == "cuda":
    print(f"sceneflow peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
