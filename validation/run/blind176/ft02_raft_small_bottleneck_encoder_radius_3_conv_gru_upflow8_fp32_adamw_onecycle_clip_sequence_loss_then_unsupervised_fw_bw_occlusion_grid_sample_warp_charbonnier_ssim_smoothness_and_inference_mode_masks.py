"""RAFT-small after princeton-vl/RAFT (`--small`: SmallEncoder of BottleneckBlocks, instance norm for the
feature network and no norm for the context network, correlation radius 3 over 4 levels, the
SmallMotionEncoder, a plain ConvGRU (3 x 3 convolutions), hidden 96 / context 64, and `upflow8`
bilinear upsampling instead of the convex mask), written by hand, in fp32 (no autocast): supervised
training on FlyingChairs-sized crops (batch 10 of 368 x 496, 12 iterations, sequence loss gamma 0.8),
AdamW (lr 4e-4, weight decay 1e-4) with OneCycleLR (pct_start 0.05, linear, cycle_momentum False) and
clip_grad_norm_ 1.0; then unsupervised fine-tuning as UFlow / ARFlow / SMURF do it: the forward and
backward flows of a pair in one batch (`cat([img1, img2])`, `cat([img2, img1])`), `flow_warp` by
`F.grid_sample` on a base grid plus the flow, the forward-backward consistency occlusion mask (|fw +
warp(bw)|^2 < 0.01 (|fw|^2 + |warp(bw)|^2) + 0.5, as a float mask), a Charbonnier photometric loss
plus an SSIM term by 3 x 3 `F.avg_pool2d`, and a first-order edge-aware smoothness loss, summed over 8
iterations with gamma 0.8, batch 4 of 320 x 640, same optimizer; then occlusion masks of two 540 x 960
pairs under inference_mode (InputPadder to 544 x 960, 16 iterations). Phases: the model, the first
supervised step, 3 more, the unsupervised fine-tuning (2 steps), the inference; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17602)
if SMALL:
    B, CROP, ITERS, STEPS, UB, UCROP, UITERS, TEST, TITERS = (
        2,
        (128, 160),
        3,
        2,
        2,
        (128, 192),
        2,
        (130, 250),
        2,
    )
else:
    B, CROP, ITERS, STEPS, UB, UCROP, UITERS, TEST, TITERS = (
        10,
        (368, 496),
        12,
        4,
        4,
        (320, 640),
        8,
        (540, 960),
        16,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"


class BottleneckBlock(nn.Module):
    def __init__(self, in_planes, planes, norm_fn="group", stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes // 4, kernel_size=1, padding=0)
        self.conv2 = nn.Conv2d(planes // 4, planes // 4, kernel_size=3, padding=1, stride=stride)
        self.conv3 = nn.Conv2d(planes // 4, planes, kernel_size=1, padding=0)
        self.relu = nn.ReLU(inplace=True)
        num_groups = planes // 8

        def norm(c):
            if norm_fn == "group":
                return nn.GroupNorm(num_groups=num_groups, num_channels=c)
            if norm_fn == "batch":
                return nn.BatchNorm2d(c)
            if norm_fn == "instance":
                return nn.InstanceNorm2d(c)
            return nn.Sequential()

        self.norm1, self.norm2, self.norm3 = norm(planes // 4), norm(planes // 4), norm(planes)
        if stride == 1:
            self.downsample = None
        else:
            self.norm4 = norm(planes)
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride), self.norm4
            )

    def forward(self, x):
        y = x
        y = self.relu(self.norm1(self.conv1(y)))
        y = self.relu(self.norm2(self.conv2(y)))
        y = self.relu(self.norm3(self.conv3(y)))
        if self.downsample is not None:
            x = self.downsample(x)
        return self.relu(x + y)


class SmallEncoder(nn.Module):
    def __init__(self, output_dim=128, norm_fn="batch", dropout=0.0):
        super().__init__()
        self.norm_fn = norm_fn
        if norm_fn == "group":
            self.norm1 = nn.GroupNorm(num_groups=8, num_channels=32)
        elif norm_fn == "batch":
            self.norm1 = nn.BatchNorm2d(32)
        elif norm_fn == "instance":
            self.norm1 = nn.InstanceNorm2d(32)
        else:
            self.norm1 = nn.Sequential()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=7, stride=2, padding=3)
        self.relu1 = nn.ReLU(inplace=True)
        self.in_planes = 32
        self.layer1 = self._make_layer(32, stride=1)
        self.layer2 = self._make_layer(64, stride=2)
        self.layer3 = self._make_layer(96, stride=2)
        self.dropout = nn.Dropout2d(p=dropout) if dropout > 0 else None
        self.conv2 = nn.Conv2d(96, output_dim, kernel_size=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, dim, stride=1):
        layer1 = BottleneckBlock(self.in_planes, dim, self.norm_fn, stride=stride)
        layer2 = BottleneckBlock(dim, dim, self.norm_fn, stride=1)
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


def upflow8(flow, mode="bilinear"):
    new_size = (8 * flow.shape[2], 8 * flow.shape[3])
    return 8 * F.interpolate(flow, size=new_size, mode=mode, align_corners=True)


class CorrBlock:
    def __init__(self, fmap1, fmap2, num_levels=4, radius=3):
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
            coords_lvl = centroid_lvl + delta.view(1, 2 * r + 1, 2 * r + 1, 2)
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


class ConvGRU(nn.Module):
    def __init__(self, hidden_dim=128, input_dim=192 + 128):
        super().__init__()
        self.convz = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convr = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)
        self.convq = nn.Conv2d(hidden_dim + input_dim, hidden_dim, 3, padding=1)

    def forward(self, h, x):
        hx = torch.cat([h, x], dim=1)
        z = torch.sigmoid(self.convz(hx))
        r = torch.sigmoid(self.convr(hx))
        q = torch.tanh(self.convq(torch.cat([r * h, x], dim=1)))
        return (1 - z) * h + z * q


class SmallMotionEncoder(nn.Module):
    def __init__(self, corr_levels=4, corr_radius=3):
        super().__init__()
        cor_planes = corr_levels * (2 * corr_radius + 1) ** 2
        self.convc1 = nn.Conv2d(cor_planes, 96, 1, padding=0)
        self.convf1 = nn.Conv2d(2, 64, 7, padding=3)
        self.convf2 = nn.Conv2d(64, 32, 3, padding=1)
        self.conv = nn.Conv2d(128, 80, 3, padding=1)

    def forward(self, flow, corr):
        cor = F.relu(self.convc1(corr))
        flo = F.relu(self.convf1(flow))
        flo = F.relu(self.convf2(flo))
        out = F.relu(self.conv(torch.cat([cor, flo], dim=1)))
        return torch.cat([out, flow], dim=1)


class SmallUpdateBlock(nn.Module):
    def __init__(self, hidden_dim=96):
        super().__init__()
        self.encoder = SmallMotionEncoder()
        self.gru = ConvGRU(hidden_dim=hidden_dim, input_dim=82 + 64)
        self.flow_head = FlowHead(hidden_dim, hidden_dim=128)

    def forward(self, net, inp, corr, flow):
        motion_features = self.encoder(flow, corr)
        inp = torch.cat([inp, motion_features], dim=1)
        net = self.gru(net, inp)
        return net, None, self.flow_head(net)


class RAFTSmall(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden_dim = hdim = 96
        self.context_dim = cdim = 64
        self.fnet = SmallEncoder(output_dim=128, norm_fn="instance", dropout=0.0)
        self.cnet = SmallEncoder(output_dim=hdim + cdim, norm_fn="none", dropout=0.0)
        self.update_block = SmallUpdateBlock(hidden_dim=hdim)

    def forward(self, image1, image2, iters=12, test_mode=False):
        image1 = (2 * (image1 / 255.0) - 1.0).contiguous()
        image2 = (2 * (image2 / 255.0) - 1.0).contiguous()
        fmap1, fmap2 = self.fnet([image1, image2])
        corr_fn = CorrBlock(fmap1.float(), fmap2.float(), radius=3)
        cnet = self.cnet(image1)
        net, inp = torch.split(cnet, [self.hidden_dim, self.context_dim], dim=1)
        net = torch.tanh(net)
        inp = torch.relu(inp)
        N, _, H, W = image1.shape
        coords0 = coords_grid(N, H // 8, W // 8, device=image1.device)
        coords1 = coords_grid(N, H // 8, W // 8, device=image1.device)
        flow_predictions = []
        for _ in range(iters):
            coords1 = coords1.detach()
            corr = corr_fn(coords1)
            flow = coords1 - coords0
            net, _, delta_flow = self.update_block(net, inp, corr, flow)
            coords1 = coords1 + delta_flow
            flow_up = upflow8(coords1 - coords0)
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
    return flow_loss


def mesh_grid(B, H, W, device):
    base_grid = torch.stack(
        torch.meshgrid(torch.arange(H, device=device), torch.arange(W, device=device), indexing="ij")[::-1], 0
    ).float()
    return base_grid[None].repeat(B, 1, 1, 1)  # B2HW


def flow_warp(x, flow12, pad="border"):
    B, _, H, W = x.size()
    v_grid = mesh_grid(B, H, W, x.device) + flow12
    v_grid = torch.stack([2.0 * v_grid[:, 0] / (W - 1) - 1.0, 2.0 * v_grid[:, 1] / (H - 1) - 1.0], dim=3)
    return F.grid_sample(x, v_grid, mode="bilinear", padding_mode=pad, align_corners=True)


def get_occu_mask_bidirection(flow12, flow21, scale=0.01, bias=0.5):
    flow21_warped = flow_warp(flow21, flow12, pad="zeros")
    flow12_diff = flow12 + flow21_warped
    mag = (flow12 * flow12).sum(1, keepdim=True) + (flow21_warped * flow21_warped).sum(1, keepdim=True)
    occ_thresh = scale * mag + bias
    return ((flow12_diff * flow12_diff).sum(1, keepdim=True) > occ_thresh).float()


def ssim(x, y):
    C1, C2 = 0.01**2, 0.03**2
    mu_x = F.avg_pool2d(x, 3, 1, 1)
    mu_y = F.avg_pool2d(y, 3, 1, 1)
    sigma_x = F.avg_pool2d(x**2, 3, 1, 1) - mu_x**2
    sigma_y = F.avg_pool2d(y**2, 3, 1, 1) - mu_y**2
    sigma_xy = F.avg_pool2d(x * y, 3, 1, 1) - mu_x * mu_y
    SSIM_n = (2 * mu_x * mu_y + C1) * (2 * sigma_xy + C2)
    SSIM_d = (mu_x**2 + mu_y**2 + C1) * (sigma_x + sigma_y + C2)
    return torch.clamp((1 - SSIM_n / SSIM_d) / 2, 0, 1)


def smooth_grad_1st(flo, image, alpha=10.0):
    img_dx = image[:, :, :, 1:] - image[:, :, :, :-1]
    img_dy = image[:, :, 1:, :] - image[:, :, :-1, :]
    weights_x = torch.exp(-torch.mean(torch.abs(img_dx), 1, keepdim=True) * alpha)
    weights_y = torch.exp(-torch.mean(torch.abs(img_dy), 1, keepdim=True) * alpha)
    dx = flo[:, :, :, 1:] - flo[:, :, :, :-1]
    dy = flo[:, :, 1:, :] - flo[:, :, :-1, :]
    return (weights_x * dx.abs()).mean() / 2.0 + (weights_y * dy.abs()).mean() / 2.0


def unsupervised_loss(flows, img1, img2, gamma=0.8):
    im1, im2 = img1 / 255.0, img2 / 255.0
    n = len(flows)
    total = 0.0
    for i, flow in enumerate(flows):
        flow12, flow21 = flow.chunk(2, dim=0)
        noc = 1.0 - get_occu_mask_bidirection(flow12.detach(), flow21.detach())
        im1_recons = flow_warp(im2, flow12)
        diff = im1_recons - im1
        charb = ((diff**2 + 1e-6) ** 0.45 * noc).mean() / noc.mean()
        ssim_l = (ssim(im1_recons * noc, im1 * noc)).mean() / noc.mean()
        smooth = smooth_grad_1st(flow12 / 20.0, im1)
        total = total + gamma ** (n - i - 1) * (0.15 * charb + 0.85 * ssim_l + 50.0 * smooth)
    return total


def image_pair(n, h, w):
    image1 = torch.rand(n, 3, h, w, device=device) * 255.0
    flow = torch.randn(n, 2, h, w, device=device) * 4.0
    image2 = (image1 + 20.0 * torch.randn(n, 3, h, w, device=device)).clamp(0.0, 255.0)
    valid = (torch.rand(n, h, w, device=device) > 0.05).float()
    return image1, image2, flow, valid


model = RAFTSmall().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=1e-4, eps=1e-8)
scheduler = torch.optim.lr_scheduler.OneCycleLR(
    optimizer, 4e-4, STEPS + 2 + 100, pct_start=0.05, cycle_momentum=False, anneal_strategy="linear"
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    image1, image2, flow, valid = image_pair(B, *CROP)
    optimizer.zero_grad()
    flow_predictions = model(image1, image2, iters=ITERS)
    loss = sequence_loss(flow_predictions, flow, valid)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del image1, image2, flow, valid, flow_predictions, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# unsupervised fine-tuning: forward and backward flow in one batch
for step in range(2):
    img1, img2, _, _ = image_pair(UB, *UCROP)
    optimizer.zero_grad(set_to_none=True)
    flows = model(torch.cat([img1, img2]), torch.cat([img2, img1]), iters=UITERS)
    loss = unsupervised_loss(flows, img1, img2)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    print(f"unsup step {step} loss {loss.item():.4f}")
del img1, img2, flows, loss
if device == "cuda":
    print(f"unsup peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
occ_rates = []
with torch.inference_mode():
    for _ in range(2):
        img1, img2, _, _ = image_pair(1, *TEST)
        pad_ht = (((TEST[0] // 8) + 1) * 8 - TEST[0]) % 8
        pad_wd = (((TEST[1] // 8) + 1) * 8 - TEST[1]) % 8
        pad = [pad_wd // 2, pad_wd - pad_wd // 2, pad_ht // 2, pad_ht - pad_ht // 2]
        a, b = F.pad(img1, pad, mode="replicate"), F.pad(img2, pad, mode="replicate")
        _, flows = model(torch.cat([a, b]), torch.cat([b, a]), iters=TITERS, test_mode=True)
        flows = flows[..., pad[2] : flows.shape[-2] - pad[3], pad[0] : flows.shape[-1] - pad[1]]
        flow12, flow21 = flows.chunk(2, dim=0)
        occ = get_occu_mask_bidirection(flow12, flow21)
        occ_rates.append(occ.mean())
    rate = torch.stack(occ_rates).mean()
print(f"occlusion rate {rate.item():.3f}")
if device == "cuda":
    print(f"test peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
