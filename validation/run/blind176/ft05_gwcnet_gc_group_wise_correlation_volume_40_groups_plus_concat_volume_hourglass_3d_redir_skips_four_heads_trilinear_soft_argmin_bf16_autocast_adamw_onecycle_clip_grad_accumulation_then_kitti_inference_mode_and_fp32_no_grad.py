"""GwcNet-gc after Guo et al. 2019 ("Group-wise Correlation Stereo Network") and the xy-guo/GwcNet
repository (models/gwcnet.py, submodule.py, models/loss.py), written by hand: the PSMNet-style feature
extraction without SPP (the 320-channel group-wise features `cat(l2, l3, l4)` and a 12-channel concat
feature by `lastconv`), the group-wise correlation volume (40 groups: `(fea1 * fea2).view(B, 40, 8, H,
W).mean(dim=2)` written into `new_zeros([B, 40, 48, H/4, W/4])` one disparity at a time) concatenated with
the 24-channel concatenation volume, the 3-D aggregation (dres0, dres1 and three hourglasses with
`Conv3d` stride 2, `ConvTranspose3d` output_padding 1 and the 1 x 1 x 1 redir skip convolutions), four
classification heads upsampled by trilinear `F.interpolate` to (192, H, W), softmax and
disparity_regression (soft-argmin), and model_loss (weights 0.5, 0.5, 0.7, 1.0; smooth L1 over the
valid pixels, as a float mask). bf16 autocast, AdamW (lr 1e-3, weight decay 1e-4) with OneCycleLR
(pct_start 0.1, cos), clip_grad_norm_ 1.0, two micro-batches of 3 accumulated per step (256 x 512
SceneFlow crops). Phases: the model, the first step, 2 more, KITTI 2015 testing (batch 2 of 375 x 1242
padded at the top and right to 384 x 1248) in bf16 autocast under inference_mode with the D1 and EPE
metrics, and one SceneFlow 540 x 960 pair padded to 544 x 960 in fp32 under no_grad; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17605)
if SMALL:
    MAXDISP, MB, ACCUM, CROP, STEPS, KITTI, KB, SF = 48, 1, 2, (64, 128), 2, (60, 150), 1, (70, 128)
else:
    MAXDISP, MB, ACCUM, CROP, STEPS, KITTI, KB, SF = 192, 3, 2, (256, 512), 3, (375, 1242), 2, (540, 960)
device = "cuda" if torch.cuda.is_available() else "cpu"


def convbn(in_channels, out_channels, kernel_size, stride, pad, dilation):
    return nn.Sequential(
        nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size=kernel_size,
            stride=stride,
            padding=dilation if dilation > 1 else pad,
            dilation=dilation,
            bias=False,
        ),
        nn.BatchNorm2d(out_channels),
    )


def convbn_3d(in_channels, out_channels, kernel_size, stride, pad):
    return nn.Sequential(
        nn.Conv3d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=pad, bias=False),
        nn.BatchNorm3d(out_channels),
    )


def disparity_regression(x, maxdisp):
    assert len(x.shape) == 4
    disp_values = torch.arange(0, maxdisp, dtype=x.dtype, device=x.device)
    disp_values = disp_values.view(1, maxdisp, 1, 1)
    return torch.sum(x * disp_values, 1, keepdim=False)


def build_concat_volume(refimg_fea, targetimg_fea, maxdisp):
    B, C, H, W = refimg_fea.shape
    volume = refimg_fea.new_zeros([B, 2 * C, maxdisp, H, W])
    for i in range(maxdisp):
        if i > 0:
            volume[:, :C, i, :, i:] = refimg_fea[:, :, :, i:]
            volume[:, C:, i, :, i:] = targetimg_fea[:, :, :, :-i]
        else:
            volume[:, :C, i, :, :] = refimg_fea
            volume[:, C:, i, :, :] = targetimg_fea
    return volume.contiguous()


def groupwise_correlation(fea1, fea2, num_groups):
    B, C, H, W = fea1.shape
    assert C % num_groups == 0
    channels_per_group = C // num_groups
    cost = (fea1 * fea2).view([B, num_groups, channels_per_group, H, W]).mean(dim=2)
    assert cost.shape == (B, num_groups, H, W)
    return cost


def build_gwc_volume(refimg_fea, targetimg_fea, maxdisp, num_groups):
    B, _, H, W = refimg_fea.shape
    volume = refimg_fea.new_zeros([B, num_groups, maxdisp, H, W])
    for i in range(maxdisp):
        if i > 0:
            volume[:, :, i, :, i:] = groupwise_correlation(
                refimg_fea[:, :, :, i:], targetimg_fea[:, :, :, :-i], num_groups
            )
        else:
            volume[:, :, i, :, :] = groupwise_correlation(refimg_fea, targetimg_fea, num_groups)
    return volume.contiguous()


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


class feature_extraction(nn.Module):
    def __init__(self, concat_feature=False, concat_feature_channel=12):
        super().__init__()
        self.concat_feature = concat_feature
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
        if self.concat_feature:
            self.lastconv = nn.Sequential(
                convbn(320, 128, 3, 1, 1, 1),
                nn.ReLU(inplace=True),
                nn.Conv2d(128, concat_feature_channel, kernel_size=1, padding=0, stride=1, bias=False),
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
        x = self.firstconv(x)
        x = self.layer1(x)
        l2 = self.layer2(x)
        l3 = self.layer3(l2)
        l4 = self.layer4(l3)
        gwc_feature = torch.cat((l2, l3, l4), dim=1)
        if not self.concat_feature:
            return {"gwc_feature": gwc_feature}
        concat_feature = self.lastconv(gwc_feature)
        return {"gwc_feature": gwc_feature, "concat_feature": concat_feature}


class hourglass(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.conv1 = nn.Sequential(convbn_3d(in_channels, in_channels * 2, 3, 2, 1), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(
            convbn_3d(in_channels * 2, in_channels * 2, 3, 1, 1), nn.ReLU(inplace=True)
        )
        self.conv3 = nn.Sequential(
            convbn_3d(in_channels * 2, in_channels * 4, 3, 2, 1), nn.ReLU(inplace=True)
        )
        self.conv4 = nn.Sequential(
            convbn_3d(in_channels * 4, in_channels * 4, 3, 1, 1), nn.ReLU(inplace=True)
        )
        self.conv5 = nn.Sequential(
            nn.ConvTranspose3d(
                in_channels * 4, in_channels * 2, 3, padding=1, output_padding=1, stride=2, bias=False
            ),
            nn.BatchNorm3d(in_channels * 2),
        )
        self.conv6 = nn.Sequential(
            nn.ConvTranspose3d(
                in_channels * 2, in_channels, 3, padding=1, output_padding=1, stride=2, bias=False
            ),
            nn.BatchNorm3d(in_channels),
        )
        self.redir1 = convbn_3d(in_channels, in_channels, kernel_size=1, stride=1, pad=0)
        self.redir2 = convbn_3d(in_channels * 2, in_channels * 2, kernel_size=1, stride=1, pad=0)

    def forward(self, x):
        conv1 = self.conv1(x)
        conv2 = self.conv2(conv1)
        conv3 = self.conv3(conv2)
        conv4 = self.conv4(conv3)
        conv5 = F.relu(self.conv5(conv4) + self.redir2(conv2), inplace=True)
        conv6 = F.relu(self.conv6(conv5) + self.redir1(x), inplace=True)
        return conv6


def classif():
    return nn.Sequential(
        convbn_3d(32, 32, 3, 1, 1),
        nn.ReLU(inplace=True),
        nn.Conv3d(32, 1, kernel_size=3, padding=1, stride=1, bias=False),
    )


class GwcNet(nn.Module):
    def __init__(self, maxdisp, use_concat_volume=True):
        super().__init__()
        self.maxdisp = maxdisp
        self.use_concat_volume = use_concat_volume
        self.num_groups = 40
        if self.use_concat_volume:
            self.concat_channels = 12
            self.feature_extraction = feature_extraction(concat_feature=True, concat_feature_channel=12)
        else:
            self.concat_channels = 0
            self.feature_extraction = feature_extraction(concat_feature=False)
        self.dres0 = nn.Sequential(
            convbn_3d(self.num_groups + self.concat_channels * 2, 32, 3, 1, 1),
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
        self.classif0, self.classif1, self.classif2, self.classif3 = (
            classif(),
            classif(),
            classif(),
            classif(),
        )
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

    def head(self, cost, left):
        cost = F.interpolate(
            cost, [self.maxdisp, left.size()[2], left.size()[3]], mode="trilinear", align_corners=False
        )
        cost = torch.squeeze(cost, 1)
        pred = F.softmax(cost, dim=1)
        return disparity_regression(pred, self.maxdisp)

    def forward(self, left, right):
        features_left = self.feature_extraction(left)
        features_right = self.feature_extraction(right)
        gwc_volume = build_gwc_volume(
            features_left["gwc_feature"], features_right["gwc_feature"], self.maxdisp // 4, self.num_groups
        )
        if self.use_concat_volume:
            concat_volume = build_concat_volume(
                features_left["concat_feature"], features_right["concat_feature"], self.maxdisp // 4
            )
            volume = torch.cat((gwc_volume, concat_volume), 1)
        else:
            volume = gwc_volume
        cost0 = self.dres0(volume)
        cost0 = self.dres1(cost0) + cost0
        out1 = self.dres2(cost0)
        out2 = self.dres3(out1)
        out3 = self.dres4(out2)
        if self.training:
            return [
                self.head(self.classif0(cost0), left),
                self.head(self.classif1(out1), left),
                self.head(self.classif2(out2), left),
                self.head(self.classif3(out3), left),
            ]
        return [self.head(self.classif3(out3), left)]


def model_loss(disp_ests, disp_gt, mask):
    weights = [0.5, 0.5, 0.7, 1.0]
    all_losses = []
    for disp_est, weight in zip(disp_ests, weights, strict=True):
        l1 = F.smooth_l1_loss(disp_est.float(), disp_gt, reduction="none")
        all_losses.append(weight * (l1 * mask).sum() / mask.sum())
    return sum(all_losses)


def stereo_pair(n, h, w):
    left = torch.randn(n, 3, h, w, device=device)
    right = torch.randn(n, 3, h, w, device=device)
    disp = torch.rand(n, h, w, device=device) * MAXDISP * 1.1
    return left, right, disp


model = GwcNet(MAXDISP, use_concat_volume=True).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=STEPS + 10, pct_start=0.1)
amp = device == "cuda"
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    optimizer.zero_grad(set_to_none=True)
    for _ in range(ACCUM):
        imgL, imgR, disp_gt = stereo_pair(MB, *CROP)
        mask = ((disp_gt < MAXDISP) & (disp_gt > 0)).float()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            disp_ests = model(imgL, imgR)
        loss = model_loss(disp_ests, disp_gt, mask) / ACCUM
        loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    epe = ((disp_ests[-1].float() - disp_gt).abs() * mask).sum() / mask.sum()
    print(f"step {step} loss {ACCUM * loss.item():.3f} epe {epe.item():.3f} grad_norm {grad_norm.item():.2f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del imgL, imgR, disp_gt, mask, disp_ests, loss, epe
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    imgL, imgR, disp_gt = stereo_pair(KB, *KITTI)
    top_pad = (16 - KITTI[0] % 16) % 16
    right_pad = (16 - KITTI[1] % 16) % 16
    imgL = F.pad(imgL, (0, right_pad, top_pad, 0))
    imgR = F.pad(imgR, (0, right_pad, top_pad, 0))
    disp_est = model(imgL, imgR)[-1][:, top_pad:, : imgL.shape[-1] - right_pad].float()
    mask = (disp_gt > 0).float()
    err = (disp_est - disp_gt).abs()
    d1 = (((err > 3) & (err / disp_gt.abs() > 0.05)).float() * mask).sum() / mask.sum()
    epe = (err * mask).sum() / mask.sum()
print(f"kitti D1 {100 * d1.item():.2f}% epe {epe.item():.3f}")
del imgL, imgR, disp_gt, disp_est, mask, err
if device == "cuda":
    print(f"kitti peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    imgL, imgR, disp_gt = stereo_pair(1, *SF)
    pad_h = (16 - SF[0] % 16) % 16
    disp_est = model(F.pad(imgL, (0, 0, pad_h, 0)), F.pad(imgR, (0, 0, pad_h, 0)))[-1][:, pad_h:]
    mask = (disp_gt < MAXDISP).float()
    epe = ((disp_est - disp_gt).abs() * mask).sum() / mask.sum()
print(f"sceneflow epe {epe.item():.3f}")
if device == "cuda":
    print(f"sceneflow peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
