"""RAFT after Teed and Deng 2020 ("RAFT: Recurrent All-Pairs Field Transforms for Optical Flow") and the
princeton-vl/RAFT repository (core/raft.py, extractor.py, update.py, corr.py, utils/utils.py), written
by hand: the BasicEncoder feature network (instance norm) and context network (batch norm, frozen by
`freeze_bn` as in the Things stage), the all-pairs correlation volume by one batched matmul of the two
1/8 feature maps (B, H*W, H*W) divided by sqrt(256), the 4-level pyramid by `F.avg_pool2d`, lookups of a
radius-4 window per level by `F.grid_sample` (bilinear_sampler, align_corners=True), the
BasicMotionEncoder and SepConvGRU ((1, 5) then (5, 1) convolutions), the flow head and the convex
upsampling mask (softmax over the 9 neighbours of `F.unfold(8 * flow, [3, 3], padding=1)`), and the
sequence loss over all 12 iterations (gamma 0.8, max_flow 400, validity mask multiplied in). bf16
autocast around the encoders and the update block as RAFT's `mixed_precision` does (the correlation in
fp32), AdamW (lr 1.25e-4, weight decay 1e-4, eps 1e-8) with OneCycleLR (pct_start 0.05,
cycle_momentum False, linear anneal), clip_grad_norm_ 1.0, Gaussian noise added to the images; batch 6
of 400 x 720 crops. Phases: the model, the first training step, 3 more steps, Sintel-sized validation
(436 x 1024, InputPadder to 440 x 1024, 32 iterations, test_mode) under no_grad with a warm start from
the previous low-resolution flow, and KITTI-sized evaluation (375 x 1242 padded to 376 x 1248, 24
iterations) under inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17601)
if SMALL:
    B, CROP, ITERS, STEPS, SINTEL, KITTI, SINTEL_ITERS, KITTI_ITERS = (
        2,
        (128, 192),
        3,
        2,
        (130, 250),
        (130, 260),
        3,
        2,
    )
else:
    B, CROP, ITERS, STEPS = 6, (400, 720), 12, 4
    SINTEL, KITTI, SINTEL_ITERS, KITTI_ITERS = (436, 1024), (375, 1242), 32, 24
device = "cuda" if torch.cuda.is_available() else "cpu"


class ResidualBlock(nn.Module):
    def __init__(self, in_planes, planes, norm_fn="group", stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, padding=1, stride=stride)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        num_groups = planes // 8

        def norm():
            if norm_fn == "group":
                return nn.GroupNorm(num_groups=num_groups, num_channels=planes)
            if norm_fn == "batch":
                return nn.BatchNorm2d(planes)
            if norm_fn == "instance":
                return nn.InstanceNorm2d(planes)
            return nn.Sequential()

        self.norm1, self.norm2 = norm(), norm()
        if stride == 1:
            self.downsample = None
        else:
            self.norm3 = norm()
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride), self.norm3
            )

    def forward(self, x):
        y = x
        y = self.relu(self.norm1(self.conv1(y)))
        y = self.relu(self.norm2(self.conv2(y)))
        if self.downsample is not None:
            x = self.downsample(x)
        return self.relu(x + y)


class BasicEncoder(nn.Module):
    def __init__(self, output_dim=128, norm_fn="batch", dropout=0.0):
        super().__init__()
        self.norm_fn = norm_fn
        if norm_fn == "batch":
            self.norm1 = nn.BatchNorm2d(64)
        elif norm_fn == "instance":
            self.norm1 = nn.InstanceNorm2d(64)
        else:
            self.norm1 = nn.GroupNorm(num_groups=8, num_channels=64)
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3)
        self.relu1 = nn.ReLU(inplace=True)
        self.in_planes = 64
        self.layer1 = self._make_layer(64, stride=1)
        self.layer2 = self._make_layer(96, stride=2)
        self.layer3 = self._make_layer(128, stride=2)
        self.conv2 = nn.Conv2d(128, output_dim, kernel_size=1)
        self.dropout = nn.Dropout2d(p=dropout) if dropout > 0 else None
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d, nn.GroupNorm)):
                if m.weight is not None:
                    nn.init.constant_(m.weight, 1)
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def _make_layer(self, dim, stride=1):
        layer1 = ResidualBlock(self.in_planes, dim, self.norm_fn, stride=stride)
        layer2 = ResidualBlock(dim, dim, self.norm_fn, stride=1)
        self.in_planes = dim
        return nn.Sequential(layer1, layer2)

    def forward(self, x):
        is_list = isinstance(x, (tuple, list))
        if is_list:
            batch_dim = x[0].shape[0]
            x = torch.cat(x, dim=0)
        x = self.relu1(self.norm1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = self.conv2(x)
        if self.training and self.dropout is not None:
            x = self.dropout(x)
        if is_list:
            x = torch.split(x, [batch_dim, batch_dim], dim=0)
        return x


def bilinear_sampler(img, coords):
    H, W = img.shape[-2:]
    xgrid, ygrid = coords.split([1, 1], dim=-1)
    xgrid = 2 * xgrid / (W - 1) - 1
    ygrid = 2 * ygrid / (H - 1) - 1
    grid = torch.cat([xgrid, ygrid], dim=-1)
    return F.grid_sample(img, grid, align_corners=True)


def coords_grid(batch, ht, wd, device):
    coords = torch.meshgrid(torch.arange(ht, device=device), torch.arange(wd, device=device), indexing="ij")
    coords = torch.stack(coords[::-1], dim=0).float()
    return coords[None].repeat(batch, 1, 1, 1)


class CorrBlock:
    def __init__(self, fmap1, fmap2, num_levels=4, radius=4):
        self.num_levels = num_levels
        self.radius = radius
        self.corr_pyramid = []
        corr = CorrBlock.corr(fmap1, fmap2)
        batch, h1, w1, dim, h2, w2 = corr.shape
        corr = corr.reshape(batch * h1 * w1, dim, h2, w2)
        self.corr_pyramid.append(corr)
        for _ in range(self.num_levels - 1):
            corr = F.avg_pool2d(corr, 2, stride=2)
            self.corr_pyramid.append(corr)

    def __call__(self, coords):
        r = self.radius
        coords = coords.permute(0, 2, 3, 1)
        batch, h1, w1, _ = coords.shape
        out_pyramid = []
        for i in range(self.num_levels):
            corr = self.corr_pyramid[i]
            dx = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            dy = torch.linspace(-r, r, 2 * r + 1, device=coords.device)
            delta = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), dim=-1)
            centroid_lvl = coords.reshape(batch * h1 * w1, 1, 1, 2) / 2**i
            delta_lvl = delta.view(1, 2 * r + 1, 2 * r + 1, 2)
            coords_lvl = centroid_lvl + delta_lvl
            corr = bilinear_sampler(corr, coords_lvl)
            out_pyramid.append(corr.view(batch, h1, w1, -1))
        out = torch.cat(out_pyramid, dim=-1)
        return out.permute(0, 3, 1, 2).contiguous().float()

    @staticmethod
    def corr(fmap1, fmap2):
        batch, dim, ht, wd = fmap1.shape
        fmap1 = fmap1.view(batch, dim, ht * wd)
        fmap2 = fmap2.view(batch, dim, ht * wd)
        corr = torch.matmul(fmap1.transpose(1, 2), fmap2)
        corr = corr.view(batch, ht, wd, 1, ht, wd)
        return corr / torch.sqrt(torch.tensor(dim).float())


class FlowHead(nn.Module):
    def __init__(self, input_dim=128, hidden_dim=256):
        super().__init__()
        self.conv1 = nn.Conv2d(input_dim, hidden_dim, 3, padding=1)
        self.conv2 = nn.Conv2d(hidden_dim, 2, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.conv2(self.relu(self.conv1(x)))


class SepConvGRU(nn.Module):
    def __init__(self, hidden_dim=128, input_dim=192 + 128):
        super().__init__()
        self.convz1 = nn.Conv2d(hidden_dim + input_dim, hidden_dim, (1, 5), padding=(0, 2))
        self.convr1 = nn.Conv2d(hidden_dim + input_dim, hidden_dim, (1, 5), padding=(0, 2))
        self.convq1 = nn.Conv2d(hidden_dim + input_dim, hidden_dim, (1, 5), padding=(0, 2))
        self.convz2 = nn.Conv2d(hidden_dim + input_dim, hidden_dim, (5, 1), padding=(2, 0))
        self.convr2 = nn.Conv2d(hidden_dim + input_dim, hidden_dim, (5, 1), padding=(2, 0))
        self.convq2 = nn.Conv2d(hidden_dim + input_dim, hidden_dim, (5, 1), padding=(2, 0))

    def forward(self, h, x):
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz1(hx))
        r = torch.sigmoid(self.convr1(hx))
        q = torch.tanh(self.convq1(torch.cat([r * h, x], dim=1)))
        h = (1 - z) * h + z * q
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz2(hx))
        r = torch.sigmoid(self.convr2(hx))
        q = torch.tanh(self.convq2(torch.cat([r * h, x], dim=1)))
        return (1 - z) * h + z * q


class BasicMotionEncoder(nn.Module):
    def __init__(self, corr_levels=4, corr_radius=4):
        super().__init__()
        cor_planes = corr_levels * (2 * corr_radius + 1) ** 2
        self.convc1 = nn.Conv2d(cor_planes, 256, 1, padding=0)
        self.convc2 = nn.Conv2d(256, 192, 3, padding=1)
        self.convf1 = nn.Conv2d(2, 128, 7, padding=3)
        self.convf2 = nn.Conv2d(128, 64, 3, padding=1)
        self.conv = nn.Conv2d(64 + 192, 128 - 2, 3, padding=1)

    def forward(self, flow, corr):
        cor = F.relu(self.convc1(corr))
        cor = F.relu(self.convc2(cor))
        flo = F.relu(self.convf1(flow))
        flo = F.relu(self.convf2(flo))
        out = F.relu(self.conv(torch.cat([cor, flo], dim=1)))
        return torch.cat([out, flow], dim=1)


class BasicUpdateBlock(nn.Module):
    def __init__(self, hidden_dim=128, input_dim=128):
        super().__init__()
        self.encoder = BasicMotionEncoder()
        self.gru = SepConvGRU(hidden_dim=hidden_dim, input_dim=128 + hidden_dim)
        self.flow_head = FlowHead(hidden_dim, hidden_dim=256)
        self.mask = nn.Sequential(
            nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(256, 64 * 9, 1, padding=0)
        )

    def forward(self, net, inp, corr, flow):
        motion_features = self.encoder(flow, corr)
        inp = torch.cat([inp, motion_features], dim=1)
        net = self.gru(net, inp)
        delta_flow = self.flow_head(net)
        mask = 0.25 * self.mask(net)  # scale mask to balence gradients
        return net, mask, delta_flow


class RAFT(nn.Module):
    def __init__(self, mixed_precision=True):
        super().__init__()
        self.hidden_dim = hdim = 128
        self.context_dim = cdim = 128
        self.mixed_precision = mixed_precision
        self.fnet = BasicEncoder(output_dim=256, norm_fn="instance", dropout=0.0)
        self.cnet = BasicEncoder(output_dim=hdim + cdim, norm_fn="batch", dropout=0.0)
        self.update_block = BasicUpdateBlock(hidden_dim=hdim)

    def freeze_bn(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()

    def initialize_flow(self, img):
        N, _, H, W = img.shape
        coords0 = coords_grid(N, H // 8, W // 8, device=img.device)
        coords1 = coords_grid(N, H // 8, W // 8, device=img.device)
        return coords0, coords1

    def upsample_flow(self, flow, mask):
        N, _, H, W = flow.shape
        mask = mask.view(N, 1, 9, 8, 8, H, W)
        mask = torch.softmax(mask, dim=2)
        up_flow = F.unfold(8 * flow, [3, 3], padding=1)
        up_flow = up_flow.view(N, 2, 9, 1, 1, H, W)
        up_flow = torch.sum(mask * up_flow, dim=2)
        up_flow = up_flow.permute(0, 1, 4, 2, 5, 3)
        return up_flow.reshape(N, 2, 8 * H, 8 * W)

    def forward(self, image1, image2, iters=12, flow_init=None, test_mode=False):
        image1 = 2 * (image1 / 255.0) - 1.0
        image2 = 2 * (image2 / 255.0) - 1.0
        image1 = image1.contiguous()
        image2 = image2.contiguous()
        amp = self.mixed_precision and image1.is_cuda
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            fmap1, fmap2 = self.fnet([image1, image2])
        fmap1 = fmap1.float()
        fmap2 = fmap2.float()
        corr_fn = CorrBlock(fmap1, fmap2, radius=4)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            cnet = self.cnet(image1)
            net, inp = torch.split(cnet, [self.hidden_dim, self.context_dim], dim=1)
            net = torch.tanh(net)
            inp = torch.relu(inp)
        coords0, coords1 = self.initialize_flow(image1)
        if flow_init is not None:
            coords1 = coords1 + flow_init
        flow_predictions = []
        for _ in range(iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1)
            flow = coords1 - coords0
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                net, up_mask, delta_flow = self.update_block(net, inp, corr, flow)
            coords1 = coords1 + delta_flow.float()
            flow_up = self.upsample_flow(coords1 - coords0, up_mask.float())
            flow_predictions.append(flow_up)
        if test_mode:
            return coords1 - coords0, flow_up
        return flow_predictions


def sequence_loss(flow_preds, flow_gt, valid, gamma=0.8, max_flow=400):
    n_predictions = len(flow_preds)
    flow_loss = 0.0
    mag = torch.sum(flow_gt**2, dim=1).sqrt()
    valid = (valid >= 0.5) & (mag < max_flow)
    for i in range(n_predictions):
        i_weight = gamma ** (n_predictions - i - 1)
        i_loss = (flow_preds[i] - flow_gt).abs()
        flow_loss += i_weight * (valid[:, None] * i_loss).mean()
    epe = torch.sum((flow_preds[-1] - flow_gt) ** 2, dim=1).sqrt()
    epe = (epe * valid).sum() / valid.sum().clamp(min=1)
    return flow_loss, epe


class InputPadder:
    """Pads images such that dimensions are divisible by 8"""

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


def image_pair(n, h, w):
    image1 = torch.rand(n, 3, h, w, device=device) * 255.0
    flow = torch.randn(n, 2, h, w, device=device) * 4.0
    image2 = (image1 + 20.0 * torch.randn(n, 3, h, w, device=device)).clamp(0.0, 255.0)
    valid = (torch.rand(n, h, w, device=device) > 0.05).float()
    return image1, image2, flow, valid


model = RAFT(mixed_precision=True).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=1.25e-4, weight_decay=1e-4, eps=1e-8)
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, 1.25e-4, STEPS + 100, pct_start=0.05, cycle_momentum=False, anneal_strategy="linear"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
model.freeze_bn()
for step in range(STEPS):
    image1, image2, flow, valid = image_pair(B, *CROP)
    stdv = float(torch.empty(1).uniform_(0.0, 5.0))
    image1 = (image1 + stdv * torch.randn(*image1.shape, device=device)).clamp(0.0, 255.0)
    image2 = (image2 + stdv * torch.randn(*image2.shape, device=device)).clamp(0.0, 255.0)
    optimizer.zero_grad()
    flow_predictions = model(image1, image2, iters=ITERS)
    loss, epe = sequence_loss(flow_predictions, flow, valid)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.3f} epe {epe.item():.3f} lr {scheduler.get_last_lr()[0]:.2e}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del image1, image2, flow, valid, flow_predictions, loss, epe
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# validate_sintel with a warm start (the previous pair's low-resolution flow as flow_init)
model.eval()
epe_list = []
flow_prev = None
with torch.no_grad():
    for _ in range(2):
        image1, image2, flow_gt, _ = image_pair(1, *SINTEL)
        padder = InputPadder(image1.shape)
        image1, image2 = padder.pad(image1, image2)
        flow_low, flow_pr = model(image1, image2, iters=SINTEL_ITERS, flow_init=flow_prev, test_mode=True)
        flow_prev = flow_low
        flow = padder.unpad(flow_pr[0])
        epe_list.append(torch.sum((flow - flow_gt[0]) ** 2, dim=0).sqrt().mean())
    sintel_epe = torch.stack(epe_list).mean()
print(f"sintel epe {sintel_epe.item():.3f}")
del image1, image2, flow_gt, flow_low, flow_pr, flow_prev, flow, epe_list
if device == "cuda":
    print(f"sintel peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# validate_kitti: pad at the bottom, F1 outliers (epe > 3 and > 5% of the magnitude)
out_list, epe_list = [], []
with torch.inference_mode():
    for _ in range(2):
        image1, image2, flow_gt, valid_gt = image_pair(1, *KITTI)
        padder = InputPadder(image1.shape, mode="kitti")
        image1, image2 = padder.pad(image1, image2)
        _, flow_pr = model(image1, image2, iters=KITTI_ITERS, test_mode=True)
        flow = padder.unpad(flow_pr[0])
        epe = torch.sum((flow - flow_gt[0]) ** 2, dim=0).sqrt()
        mag = torch.sum(flow_gt[0] ** 2, dim=0).sqrt()
        out = ((epe > 3.0) & ((epe / mag) > 0.05)).float()
        val = valid_gt[0] >= 0.5
        epe_list.append((epe * val).sum() / val.sum())
        out_list.append((out * val).sum() / val.sum())
    f1 = 100 * torch.stack(out_list).mean()
    kitti_epe = torch.stack(epe_list).mean()
print(f"kitti epe {kitti_epe.item():.3f} f1 {f1.item():.2f}")
if device == "cuda":
    print(f"kitti peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
