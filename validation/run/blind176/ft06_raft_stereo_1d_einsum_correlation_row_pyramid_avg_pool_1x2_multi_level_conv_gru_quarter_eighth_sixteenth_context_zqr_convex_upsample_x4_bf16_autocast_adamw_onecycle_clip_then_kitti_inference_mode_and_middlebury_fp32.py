"""RAFT-Stereo after Lipson, Teed and Deng 2021 ("RAFT-Stereo: Multilevel Recurrent Field Transforms for
Stereo Matching") and the princeton-vl/RAFT-Stereo repository (core/raft_stereo.py, corr.py's
CorrBlock1D, update.py's BasicMultiUpdateBlock, extractor.py, train_stereo.py), written by hand: a
BasicEncoder feature network at 1/4 resolution (instance norm, n_downsample 2), a MultiBasicEncoder
context network (batch norm, frozen by `freeze_bn`) with hidden and context heads at 1/4, 1/8 and 1/16,
the context_zqr convolutions split into the GRU biases, the 1-D correlation volume by
`torch.einsum('aijk,aijh->ajkh')` (every pixel against its row) reshaped to (B*H*W, 1, 1, W) with a
4-level pyramid of `F.avg_pool2d([1, 2], stride=[1, 2])`, radius-4 lookups along x by `F.grid_sample`,
three ConvGRUs (1/16, 1/8, 1/4) coupled by `avg_pool2d(3, 2, 1)` and bilinear interpolation, the flow
head with the y component zeroed (`delta_flow[:, 1] = 0.0`), and convex upsampling x4 (softmax over 9
neighbours of `F.unfold`). bf16 autocast (mixed_precision), AdamW (lr 2e-4, weight decay 1e-5) with
OneCycleLR (pct_start 0.01, linear, cycle_momentum False), clip_grad_norm_ 1.0, the sequence loss
(gamma 0.9 adjusted to the iteration count, max_flow 700, as a masked mean) over 12 iterations, batch
4 of 320 x 720 crops. Phases: the model, the first step, 2 more, KITTI validation (two 375 x 1242 pairs
padded to 384 x 1248, 32 iterations, test_mode, D1 > 3 px) under inference_mode in bf16 autocast, and
one Middlebury-H-sized pair (1,000 x 1,500 padded to 1,024 x 1,504, 24 iterations) in fp32 under no_grad;
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17606)
if SMALL:
    B, CROP, ITERS, STEPS, KITTI, KITERS, MIDD, MITERS = 2, (128, 192), 3, 2, (120, 250), 3, (130, 200), 2
else:
    B, CROP, ITERS, STEPS, KITTI, KITERS, MIDD, MITERS = (
        4,
        (320, 720),
        12,
        3,
        (375, 1242),
        32,
        (1000, 1500),
        24,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"
HIDDEN = [128, 128, 128]


class ResidualBlock(nn.Module):
    def __init__(self, in_planes, planes, norm_fn="group", stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1)
        self.relu = nn.ReLU(inplace=True)

        def norm():
            if norm_fn == "group":
                return nn.GroupNorm(num_groups=planes // 8, num_channels=planes)
            if norm_fn == "batch":
                return nn.BatchNorm2d(planes)
            if norm_fn == "instance":
                return nn.InstanceNorm2d(planes)
            return nn.Sequential()

        self.norm1, self.norm2 = norm(), norm()
        if stride == 1 and in_planes == planes:
            self.downsample = None
        else:
            self.norm3 = norm()
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride), self.norm3
            )

    def forward(self, x):
        y = self.relu(self.norm1(self.conv1(x)))
        y = self.relu(self.norm2(self.conv2(y)))
        if self.downsample is not None:
            x = self.downsample(x)
        return self.relu(x + y)


def make_norm(norm_fn, c):
    if norm_fn == "batch":
        return nn.BatchNorm2d(c)
    if norm_fn == "instance":
        return nn.InstanceNorm2d(c)
    return nn.GroupNorm(num_groups=8, num_channels=c)


class BasicEncoder(nn.Module):
    def __init__(self, output_dim=128, norm_fn="batch", downsample=2):
        super().__init__()
        self.norm_fn = norm_fn
        self.norm1 = make_norm(norm_fn, 64)
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=1 + (downsample > 2), padding=3)
        self.relu1 = nn.ReLU(inplace=True)
        self.in_planes = 64
        self.layer1 = self._make_layer(64, stride=1)
        self.layer2 = self._make_layer(96, stride=1 + (downsample > 1))
        self.layer3 = self._make_layer(128, stride=1 + (downsample > 0))
        self.conv2 = nn.Conv2d(128, output_dim, kernel_size=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, dim, stride=1):
        layers = (
            ResidualBlock(self.in_planes, dim, self.norm_fn, stride=stride),
            ResidualBlock(dim, dim, self.norm_fn),
        )
        self.in_planes = dim
        return nn.Sequential(*layers)

    def forward(self, x):
        batch_dim = x[0].shape[0]
        x = torch.cat(x, dim=0)
        x = self.relu1(self.norm1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = self.conv2(x)
        return x.split(split_size=batch_dim, dim=0)


class MultiBasicEncoder(nn.Module):
    def __init__(self, output_dim=([128] * 3, [128] * 3), norm_fn="batch", downsample=2):
        super().__init__()
        self.norm_fn = norm_fn
        self.norm1 = make_norm(norm_fn, 64)
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=1 + (downsample > 2), padding=3)
        self.relu1 = nn.ReLU(inplace=True)
        self.in_planes = 64
        self.layer1 = self._make_layer(64, stride=1)
        self.layer2 = self._make_layer(96, stride=1 + (downsample > 1))
        self.layer3 = self._make_layer(128, stride=1 + (downsample > 0))
        self.layer4 = self._make_layer(128, stride=2)
        self.layer5 = self._make_layer(128, stride=2)
        self.outputs04 = nn.ModuleList(
            [
                nn.Sequential(
                    ResidualBlock(128, 128, self.norm_fn, stride=1), nn.Conv2d(128, dim[2], 3, padding=1)
                )
                for dim in output_dim
            ]
        )
        self.outputs08 = nn.ModuleList(
            [
                nn.Sequential(
                    ResidualBlock(128, 128, self.norm_fn, stride=1), nn.Conv2d(128, dim[1], 3, padding=1)
                )
                for dim in output_dim
            ]
        )
        self.outputs16 = nn.ModuleList([nn.Conv2d(128, dim[0], 3, padding=1) for dim in output_dim])
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, dim, stride=1):
        layers = (
            ResidualBlock(self.in_planes, dim, self.norm_fn, stride=stride),
            ResidualBlock(dim, dim, self.norm_fn),
        )
        self.in_planes = dim
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.relu1(self.norm1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        outputs04 = [f(x) for f in self.outputs04]
        y = self.layer4(x)
        outputs08 = [f(y) for f in self.outputs08]
        z = self.layer5(y)
        outputs16 = [f(z) for f in self.outputs16]
        return (outputs04, outputs08, outputs16)


def bilinear_sampler(img, coords):
    H, W = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (W - 1) - 1
    if H > 1:
        ygrid = 2 * ygrid / (H - 1) - 1
    grid = torch.cat([xgrid, ygrid], dim=-1)
    return F.grid_sample(img, grid, align_corners=True)


def coords_grid(batch, ht, wd):
    coords = torch.meshgrid(torch.arange(ht), torch.arange(wd), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch, 1, 1, 1)


class CorrBlock1D:
    def __init__(self, fmap1, fmap2, num_levels=4, radius=4):
        self.num_levels = num_levels
        self.radius = radius
        self.corr_pyramid = []
        corr = CorrBlock1D.corr(fmap1, fmap2)
        batch, h1, w1, _, w2 = corr.shape
        corr = corr.reshape(batch * h1 * w1, 1, 1, w2)
        self.corr_pyramid.append(corr)
        for _ in range(self.num_levels):
            corr = F.avg_pool2d(corr, [1, 2], stride=[1, 2])
            self.corr_pyramid.append(corr)

    def __call__(self, coords):
        r = self.radius
        coords = coords[:, :1].permute(0, 2, 3, 1)
        batch, h1, w1, _ = coords.shape
        out_pyramid = []
        for i in range(self.num_levels):
            corr = self.corr_pyramid[i]
            dx = torch.linspace(-r, r, 2 * r + 1)
            dx = dx.view(1, 1, 2 * r + 1, 1).to(coords.device)
            x0 = dx + coords.reshape(batch * h1 * w1, 1, 1, 1) / 2**i
            y0 = torch.zeros_like(x0)
            coords_lvl = torch.cat([x0, y0], dim=-1)
            corr = bilinear_sampler(corr, coords_lvl)
            out_pyramid.append(corr.view(batch, h1, w1, -1))
        out = torch.cat(out_pyramid, dim=-1)
        return out.permute(0, 3, 1, 2).contiguous().float()

    @staticmethod
    def corr(fmap1, fmap2):
        B, D, H, W1 = fmap1.shape
        _, _, _, W2 = fmap2.shape
        fmap1 = fmap1.view(B, D, H, W1)
        fmap2 = fmap2.view(B, D, H, W2)
        corr = torch.einsum("aijk,aijh->ajkh", fmap1, fmap2)
        corr = corr.reshape(B, H, W1, 1, W2).contiguous()
        return corr / torch.sqrt(torch.tensor(D).float())


class FlowHead(nn.Module):
    def __init__(self, input_dim=128, hidden_dim=256, output_dim=2):
        super().__init__()
        self.conv1 = nn.Conv2d(input_dim, hidden_dim, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden_dim, output_dim, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.conv2(self.relu(self.conv1(x)))


class ConvGRU(nn.Module):
    def __init__(self, hidden_dim, input_dim, kernel_size=3):
        super().__init__()
        self.convz = nn.Conv2d(hidden_dim + input_dim, hidden_dim, kernel_size, padding=kernel_size // 2)
        self.convr = nn.Conv2d(hidden_dim + input_dim, hidden_dim, kernel_size, padding=kernel_size // 2)
        self.convq = nn.Conv2d(hidden_dim + input_dim, hidden_dim, kernel_size, padding=kernel_size // 2)

    def forward(self, h, cz, cr, cq, *x_list):
        x = torch.cat(x_list, dim=1)
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx) + cz)
        r = torch.sigmoid(self.convr(hx) + cr)
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)) + cq)
        return (1 - z) * h + z * q


class BasicMotionEncoder(nn.Module):
    def __init__(self, corr_levels=4, corr_radius=4):
        super().__init__()
        cor_planes = corr_levels * (2 * corr_radius + 1)
        self.convc1 = nn.Conv2d(cor_planes, 64, 1, padding=0)
        self.convc2 = nn.Conv2d(64, 64, 3, padding=1)
        self.convf1 = nn.Conv2d(2, 64, 7, padding=3)
        self.convf2 = nn.Conv2d(64, 64, 3, padding=1)
        self.conv = nn.Conv2d(64 + 64, 128 - 2, 3, padding=1)

    def forward(self, flow, corr):
        cor = F.relu(self.convc1(corr))
        cor = F.relu(self.convc2(cor))
        flo = F.relu(self.convf1(flow))
        flo = F.relu(self.convf2(flo))
        out = F.relu(self.conv(torch.cat([cor, flo], dim=1)))
        return torch.cat([out, flow], dim=1)


def pool2x(x):
    return F.avg_pool2d(x, 3, stride=2, padding=1)


def interp(x, dest):
    return F.interpolate(x, dest.shape[2:], mode="bilinear", align_corners=True)


class BasicMultiUpdateBlock(nn.Module):
    def __init__(self, hidden_dims, n_gru_layers=3, n_downsample=2):
        super().__init__()
        self.encoder = BasicMotionEncoder()
        encoder_output_dim = 128
        self.gru04 = ConvGRU(hidden_dims[2], encoder_output_dim + hidden_dims[1] * (n_gru_layers > 1))
        self.gru08 = ConvGRU(hidden_dims[1], hidden_dims[0] * (n_gru_layers == 3) + hidden_dims[2])
        self.gru16 = ConvGRU(hidden_dims[0], hidden_dims[1])
        self.flow_head = FlowHead(hidden_dims[2], hidden_dim=256, output_dim=2)
        factor = 2**n_downsample
        self.mask = nn.Sequential(
            nn.Conv2d(hidden_dims[2], 256, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(256, (factor**2) * 9, 1, padding=0),
        )

    def forward(self, net, inp, corr=None, flow=None, iter04=True, iter08=True, iter16=True, update=True):
        if iter16:
            net[2] = self.gru16(net[2], *(inp[2]), pool2x(net[1]))
        if iter08:
            net[1] = self.gru08(net[1], *(inp[1]), pool2x(net[0]), interp(net[2], net[1]))
        if iter04:
            motion_features = self.encoder(flow, corr)
            net[0] = self.gru04(net[0], *(inp[0]), motion_features, interp(net[1], net[0]))
        if not update:
            return net
        delta_flow = self.flow_head(net[0])
        mask = 0.25 * self.mask(net[0])
        return net, mask, delta_flow


class RAFTStereo(nn.Module):
    def __init__(self, mixed_precision=True, n_downsample=2, n_gru_layers=3):
        super().__init__()
        self.mixed_precision = mixed_precision
        self.n_downsample = n_downsample
        self.n_gru_layers = n_gru_layers
        context_dims = HIDDEN
        self.cnet = MultiBasicEncoder(
            output_dim=[HIDDEN, context_dims], norm_fn="batch", downsample=n_downsample
        )
        self.update_block = BasicMultiUpdateBlock(HIDDEN, n_gru_layers, n_downsample)
        self.context_zqr_convs = nn.ModuleList(
            [nn.Conv2d(context_dims[i], HIDDEN[i] * 3, 3, padding=3 // 2) for i in range(n_gru_layers)]
        )
        self.fnet = BasicEncoder(output_dim=256, norm_fn="instance", downsample=n_downsample)

    def freeze_bn(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()

    def upsample_flow(self, flow, mask):
        N, D, H, W = flow.shape
        factor = 2**self.n_downsample
        mask = mask.view(N, 1, 9, factor, factor, H, W)
        mask = torch.softmax(mask, dim=2)
        up_flow = F.unfold(factor * flow, [3, 3], padding=1)
        up_flow = up_flow.view(N, D, 9, 1, 1, H, W)
        up_flow = torch.sum(mask * up_flow, dim=2)
        up_flow = up_flow.permute(0, 1, 4, 2, 5, 3)
        return up_flow.reshape(N, D, factor * H, factor * W)

    def forward(self, image1, image2, iters=12, test_mode=False):
        image1 = (2 * (image1 / 255.0) - 1.0).contiguous()
        image2 = (2 * (image2 / 255.0) - 1.0).contiguous()
        amp = self.mixed_precision and image1.is_cuda
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            cnet_list = self.cnet(image1)
            fmap1, fmap2 = self.fnet([image1, image2])
            net_list = [torch.tanh(x[0]) for x in cnet_list]
            inp_list = [torch.relu(x[1]) for x in cnet_list]
            inp_list = [
                list(conv(i).split(split_size=conv.out_channels // 3, dim=1))
                for i, conv in zip(inp_list, self.context_zqr_convs, strict=True)
            ]
        corr_fn = CorrBlock1D(fmap1.float(), fmap2.float(), radius=4, num_levels=4)
        N, _, H, W = net_list[0].shape
        coords0 = coords_grid(N, H, W).to(image1.device)
        coords1 = coords_grid(N, H, W).to(image1.device)
        flow_predictions = []
        for itr in range(iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1)
            flow = coords1 - coords0
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                net_list, up_mask, delta_flow = self.update_block(
                    net_list,
                    inp_list,
                    corr,
                    flow,
                    iter16=self.n_gru_layers == 3,
                    iter08=self.n_gru_layers >= 2,
                )
            delta_flow[:, 1] = 0.0
            coords1 = coords1 + delta_flow
            if test_mode and itr < iters - 1:
                continue
            flow_up = self.upsample_flow(coords1 - coords0, up_mask.float())
            flow_predictions.append(flow_up[:, :1])
        if test_mode:
            return coords1 - coords0, flow_predictions[-1]
        return flow_predictions


def sequence_loss(flow_preds, flow_gt, valid, loss_gamma=0.9, max_flow=700):
    n_predictions = len(flow_preds)
    flow_loss = 0.0
    mag = torch.sum(flow_gt**2, dim=1).sqrt()
    valid = ((valid >= 0.5) & (mag < max_flow)).unsqueeze(1).float()
    for i in range(n_predictions):
        adjusted_loss_gamma = loss_gamma ** (15 / (n_predictions - 1))
        i_weight = adjusted_loss_gamma ** (n_predictions - i - 1)
        i_loss = (flow_preds[i] - flow_gt).abs()
        flow_loss += i_weight * (i_loss * valid).sum() / valid.sum()
    epe = (torch.sum((flow_preds[-1] - flow_gt) ** 2, dim=1).sqrt() * valid[:, 0]).sum() / valid.sum()
    return flow_loss, epe


def stereo_pair(n, h, w):
    image1 = torch.rand(n, 3, h, w, device=device) * 255.0
    image2 = (image1 + 20.0 * torch.randn(n, 3, h, w, device=device)).clamp(0.0, 255.0)
    disp = -torch.rand(n, 1, h, w, device=device) * 100.0
    valid = (torch.rand(n, h, w, device=device) > 0.1).float()
    return image1, image2, disp, valid


def pad32(*imgs):
    ht, wd = imgs[0].shape[-2:]
    pad_ht = (((ht // 32) + 1) * 32 - ht) % 32
    pad_wd = (((wd // 32) + 1) * 32 - wd) % 32
    pad = [pad_wd // 2, pad_wd - pad_wd // 2, pad_ht // 2, pad_ht - pad_ht // 2]
    return [F.pad(x, pad, mode="replicate") for x in imgs], pad


model = RAFTStereo(mixed_precision=True).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=1e-5, eps=1e-8)
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, 2e-4, STEPS + 100, pct_start=0.01, cycle_momentum=False, anneal_strategy="linear"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
model.freeze_bn()
for step in range(STEPS):
    image1, image2, flow, valid = stereo_pair(B, *CROP)
    optimizer.zero_grad()
    flow_predictions = model(image1, image2, iters=ITERS)
    loss, epe = sequence_loss(flow_predictions, flow, valid)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.3f} epe {epe.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del image1, image2, flow, valid, flow_predictions, loss, epe
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# validate_kitti: D1 over the valid pixels, bf16 autocast through the model's own flag
model.eval()
d1s = []
with torch.inference_mode():
    for _ in range(2):
        image1, image2, flow_gt, valid_gt = stereo_pair(1, *KITTI)
        (image1, image2), pad = pad32(image1, image2)
        _, flow_pr = model(image1, image2, iters=KITERS, test_mode=True)
        flow_pr = flow_pr[..., pad[2] : flow_pr.shape[-2] - pad[3], pad[0] : flow_pr.shape[-1] - pad[1]]
        epe = torch.sum((flow_pr - flow_gt) ** 2, dim=1).sqrt()
        d1s.append(((epe > 3.0).float() * valid_gt).sum() / valid_gt.sum())
    d1 = torch.stack(d1s).mean()
print(f"kitti D1 {100 * d1.item():.2f}%")
del image1, image2, flow_gt, valid_gt, flow_pr, epe, d1s
if device == "cuda":
    print(f"kitti peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# Middlebury-H in full precision (mixed_precision off), no_grad
model.mixed_precision = False
with torch.no_grad():
    image1, image2, flow_gt, valid_gt = stereo_pair(1, *MIDD)
    (image1, image2), pad = pad32(image1, image2)
    _, flow_pr = model(image1, image2, iters=MITERS, test_mode=True)
    flow_pr = flow_pr[..., pad[2] : flow_pr.shape[-2] - pad[3], pad[0] : flow_pr.shape[-1] - pad[1]]
    epe = torch.sum((flow_pr - flow_gt) ** 2, dim=1).sqrt()
    bad2 = ((epe > 2.0).float() * valid_gt).sum() / valid_gt.sum()
    mean_epe = (epe * valid_gt).sum() / valid_gt.sum()
print(f"middlebury bad2 {100 * bad2.item():.2f}% epe {mean_epe.item():.3f}")
if device == "cuda":
    print(f"middlebury peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
