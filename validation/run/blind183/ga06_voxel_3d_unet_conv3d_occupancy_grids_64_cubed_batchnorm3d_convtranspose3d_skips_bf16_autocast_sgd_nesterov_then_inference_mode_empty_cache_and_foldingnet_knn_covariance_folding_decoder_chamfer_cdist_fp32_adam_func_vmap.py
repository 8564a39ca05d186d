"""Two 3-D models, written by hand. First a dense voxel 3-D U-Net after Cicek et al. 2016 ("3D U-Net")
for semantic completion of occupancy grids (SSCNet-style: one occupancy channel in, 12 classes out, no
sparse convolutions): 64^3 grids, an encoder of two Conv3d 3 x 3 x 3 + BatchNorm3d + ReLU per level at
32, 64, 128, 256 channels with MaxPool3d(2) between levels, a decoder of ConvTranspose3d(2, stride 2),
torch.cat skips and two convolutions per level, a 1 x 1 x 1 classifier; cross-entropy with the empty
voxels weighted 0.05 and an ignore index for voxels outside the view; bf16 autocast, SGD (lr 0.01,
momentum 0.9, nesterov, weight decay 5e-4), batch 6: the first step its own phase, then 2 steps;
inference under inference_mode and bf16 autocast at batch 12, the argmax moved to the host; then the
U-Net is dropped and the cache emptied. Second FoldingNet after Yang et al. 2018 ("FoldingNet: Point
Cloud Auto-encoder via Deep Grid Deformation"): the encoder's local covariances (the 3 x 3 outer
products of each point's 16 nearest neighbours found by torch.cdist and topk, flattened and
concatenated to the coordinates, 12 channels), a Conv1d 12 -> 64 -> 64 -> 64 MLP, two graph layers
(local max pooling over the kNN graph by gathering, then Conv1d to 128 and 1,024), a global max pool
and an MLP to a 512-d codeword; the decoder replicates the codeword over a 45 x 45 grid (2,025 points)
and folds twice (514 -> 512 -> 512 -> 3, then 515 -> 512 -> 512 -> 3). The augmented Chamfer distance
by torch.cdist between the 2,025 reconstructed and 2,048 input points (the max of the two directed
means), fp32, Adam (lr 1e-4, weight decay 1e-6), batch 32 for 3 steps; then the per-shape Chamfer
distances of a 64-cloud test batch under no_grad through torch.func.vmap over the clouds. 5 phases."""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18306)
if SMALL:
    GRID, B, STEPS, EVAL_B, FB, FSTEPS, NPTS, GRID2D, TEST_B = 16, 2, 2, 2, 2, 2, 256, 8, 2
else:
    GRID, B, STEPS, EVAL_B, FB, FSTEPS, NPTS, GRID2D, TEST_B = 64, 6, 3, 12, 32, 3, 2048, 45, 64
NCLS, KNN = 12, 16
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_device = "cuda" if device == "cuda" else "cpu"


def double_conv(c_in, c_out):
    return nn.Sequential(
        nn.Conv3d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm3d(c_out),
        nn.ReLU(inplace=True),
        nn.Conv3d(c_out, c_out, 3, padding=1, bias=False),
        nn.BatchNorm3d(c_out),
        nn.ReLU(inplace=True),
    )


class UNet3D(nn.Module):
    def __init__(self, c_in=1, n_classes=12, widths=(32, 64, 128, 256)):
        super().__init__()
        self.downs = nn.ModuleList()
        c = c_in
        for w in widths:
            self.downs.append(double_conv(c, w))
            c = w
        self.pool = nn.MaxPool3d(2)
        self.ups = nn.ModuleList()
        self.up_convs = nn.ModuleList()
        for w in reversed(widths[:-1]):
            self.ups.append(nn.ConvTranspose3d(c, w, 2, stride=2))
            self.up_convs.append(double_conv(2 * w, w))
            c = w
        self.classifier = nn.Conv3d(c, n_classes, 1)

    def forward(self, x):
        skips = []
        for i, down in enumerate(self.downs):
            x = down(x)
            if i < len(self.downs) - 1:
                skips.append(x)
                x = self.pool(x)
        for up, conv in zip(self.ups, self.up_convs, strict=True):
            x = up(x)
            x = conv(torch.cat([skips.pop(), x], dim=1))
        return self.classifier(x)


def occupancy_batch(b):
    occ = (torch.rand(b, 1, GRID, GRID, GRID, device=device) < 0.1).float()
    labels = torch.randint(0, NCLS, (b, GRID, GRID, GRID), device=device)
    labels = torch.where(
        torch.rand(b, GRID, GRID, GRID, device=device) < 0.1, torch.full_like(labels, 255), labels
    )
    return occ, labels


unet = UNet3D(1, NCLS).to(device)
class_weights = torch.ones(NCLS, device=device)
class_weights[0] = 0.05
opt = torch.optim.SGD(unet.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
print(f"unet params {sum(p.numel() for p in unet.parameters())}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

unet.train()
for step in range(STEPS):
    occ, labels = occupancy_batch(B)
    opt.zero_grad(set_to_none=True)
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        logits = unet(occ)
        loss = F.cross_entropy(logits, labels, weight=class_weights, ignore_index=255)
    loss.backward()
    opt.step()
    print(f"unet step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
del occ, labels, logits, loss
if device == "cuda":
    print(f"unet train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

unet.eval()
with torch.inference_mode(), torch.autocast(amp_device, dtype=torch.bfloat16):
    occ, labels = occupancy_batch(EVAL_B)
    pred = unet(occ).argmax(1).to(torch.uint8).cpu()
print(f"predicted occupied {(pred > 0).float().mean().item():.3f}")
del unet, opt, occ, labels
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"unet eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def knn_indices(pts, k):
    # pts: (B, N, 3)
    dist = torch.cdist(pts, pts)
    return dist.topk(k, dim=-1, largest=False)[1]  # (B, N, k)


def local_cov(pts, idx):
    b, n, _ = pts.shape
    k = idx.size(-1)
    neighbours = torch.gather(pts.unsqueeze(1).expand(b, n, n, 3), 2, idx.unsqueeze(-1).expand(b, n, k, 3))
    cov = torch.matmul(neighbours.transpose(2, 3), neighbours).view(b, n, 9) / k
    return torch.cat([pts, cov], dim=2).transpose(1, 2)  # (B, 12, N)


def local_maxpool(x, idx):
    # x: (B, C, N) -> max over each point's kNN
    b, c, n = x.shape
    k = idx.size(-1)
    flat = x.transpose(1, 2).reshape(b * n, c)
    idx_base = torch.arange(0, b, device=x.device).view(-1, 1, 1) * n
    gathered = flat[(idx + idx_base).view(-1)].view(b, n, k, c)
    return gathered.max(dim=2)[0].transpose(1, 2)


class FoldingNetEncoder(nn.Module):
    def __init__(self, feat_dims=512):
        super().__init__()
        self.mlp1 = nn.Sequential(
            nn.Conv1d(12, 64, 1), nn.ReLU(), nn.Conv1d(64, 64, 1), nn.ReLU(), nn.Conv1d(64, 64, 1), nn.ReLU()
        )
        self.linear1 = nn.Linear(64, 64)
        self.conv1 = nn.Conv1d(64, 128, 1)
        self.linear2 = nn.Linear(128, 128)
        self.conv2 = nn.Conv1d(128, 1024, 1)
        self.mlp2 = nn.Sequential(
            nn.Conv1d(1024, feat_dims, 1), nn.ReLU(), nn.Conv1d(feat_dims, feat_dims, 1)
        )

    def graph_layer(self, x, idx):
        x = local_maxpool(x, idx)
        x = self.linear1(x.transpose(1, 2)).transpose(1, 2)
        x = F.relu(self.conv1(x))
        x = local_maxpool(x, idx)
        x = self.linear2(x.transpose(1, 2)).transpose(1, 2)
        return self.conv2(x)

    def forward(self, pts):
        idx = knn_indices(pts, KNN)
        x = self.mlp1(local_cov(pts, idx))
        x = self.graph_layer(x, idx)
        x = torch.max(x, 2, keepdim=True)[0]
        return self.mlp2(x)  # (B, feat, 1)


class FoldingNetDecoder(nn.Module):
    def __init__(self, feat_dims=512, grid=45):
        super().__init__()
        self.m = grid * grid
        lin = torch.linspace(-0.3, 0.3, grid)
        self.register_buffer(
            "plane", torch.stack(torch.meshgrid(lin, lin, indexing="ij"), -1).view(-1, 2).t().contiguous()
        )
        self.folding1 = nn.Sequential(
            nn.Conv1d(feat_dims + 2, feat_dims, 1),
            nn.ReLU(),
            nn.Conv1d(feat_dims, feat_dims, 1),
            nn.ReLU(),
            nn.Conv1d(feat_dims, 3, 1),
        )
        self.folding2 = nn.Sequential(
            nn.Conv1d(feat_dims + 3, feat_dims, 1),
            nn.ReLU(),
            nn.Conv1d(feat_dims, feat_dims, 1),
            nn.ReLU(),
            nn.Conv1d(feat_dims, 3, 1),
        )

    def forward(self, x):
        x = x.repeat(1, 1, self.m)  # (B, feat, m)
        points = self.plane.unsqueeze(0).expand(x.size(0), -1, -1)
        fold1 = self.folding1(torch.cat((x, points), dim=1))
        fold2 = self.folding2(torch.cat((x, fold1), dim=1))
        return fold2.transpose(1, 2)  # (B, m, 3)


class FoldingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = FoldingNetEncoder()
        self.decoder = FoldingNetDecoder(grid=GRID2D)

    def forward(self, pts):
        return self.decoder(self.encoder(pts))


def chamfer(a, b):
    d = torch.cdist(a, b) ** 2
    return torch.maximum(d.min(dim=-1)[0].mean(-1), d.min(dim=-2)[0].mean(-1))


def shape_batch(b):
    pts = torch.randn(b, NPTS, 3, device=device)
    return pts / pts.norm(dim=-1, keepdim=True).amax(dim=1, keepdim=True)


fold = FoldingNet().to(device)
fopt = torch.optim.Adam(fold.parameters(), lr=1e-4, betas=(0.9, 0.999), weight_decay=1e-6)
print(f"foldingnet params {sum(p.numel() for p in fold.parameters())}")
fold.train()
for step in range(FSTEPS):
    pts = shape_batch(FB)
    fopt.zero_grad()
    recon = fold(pts)
    loss = chamfer(recon, pts).mean()
    loss.backward()
    fopt.step()
    print(f"fold step {step} chamfer {loss.item():.5f}")
del pts, recon, loss
if device == "cuda":
    print(
        f"foldingnet train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

fold.eval()
with torch.no_grad():
    pts = shape_batch(TEST_B)
    recon = fold(pts)
    per_shape = torch.func.vmap(chamfer)(recon, pts)
print(f"test chamfer mean {per_shape.mean().item():.5f} worst {per_shape.max().item():.5f}")
if device == "cuda":
    print(f"foldingnet eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
