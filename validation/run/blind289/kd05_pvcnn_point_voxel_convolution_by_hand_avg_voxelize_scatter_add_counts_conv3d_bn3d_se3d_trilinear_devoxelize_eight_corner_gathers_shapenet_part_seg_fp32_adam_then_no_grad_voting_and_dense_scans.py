"""PVCNN (Liu et al., NeurIPS 2019, "Point-Voxel CNN for Efficient 3D Deep Learning") for ShapeNet-part
segmentation, with the reference's CUDA extensions (mit-han-lab/pvcnn `avg_voxelize`,
`trilinear_devoxelize`) written by hand in plain PyTorch. Synthetic part-labelled clouds: 16 categories
(ShapeNet's part counts, 50 parts), 2,048 points with normals and the category one-hot, parts assigned by
height bands of a per-category warped shape. PVConv: coordinates centred and normalised into the unit ball
then scaled to the voxel grid (`norm_coords`), rounded to voxel indices; average voxelisation by two
`scatter_add_` (features and counts) into (B, C, r^3) and a clamped division; two Conv3d(3) + BatchNorm3d +
LeakyReLU(0.1) and a squeeze-excitation (SE3d) on the grid; trilinear devoxelisation as eight `gather`s of
the flattened grid at the corner indices weighted by the fractional offsets; plus a point branch
(Conv1d 1 x 1 + BN + ReLU) added. Blocks ((64, 1, 32), (64, 2, 16), (128, 1, 16), (1024, 1, point-only)),
every block's features concatenated with the global max and the one-hot, a shared-MLP classifier with
dropout to 50 parts. Cross-entropy over (B, 50, N), Adam lr 1e-3, fp32.
Phase 1: 8 steps at 16 clouds x 2,048 points. Phase 2: no_grad evaluation with voting (4 random anisotropic
scalings, softmax averaged) at 16 x 2,048, part IoUs from one-hot sums. Phase 3: no_grad dense scans,
16 clouds x 16,384 points (the grids keep their size, the point tensors grow 8x).
3 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2895)
dev = "cuda"
PARTS = [4, 2, 2, 4, 4, 3, 3, 2, 4, 2, 6, 2, 3, 3, 3, 3]
OFFSETS = torch.tensor([0, *PARTS[:-1]]).cumsum(0).tolist()
NUM_SHAPES, NUM_CLASSES = len(PARTS), sum(PARTS)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# --- voxel <-> point by hand --------------------------------------------------------------------------------
def avg_voxelize(features, vox_coords, r):
    B, C, _ = features.shape
    idx = (vox_coords[:, 0] * r + vox_coords[:, 1]) * r + vox_coords[:, 2]  # (B, N)
    out = features.new_zeros(B, C, r**3).scatter_add_(2, idx.unsqueeze(1).expand(-1, C, -1), features)
    cnt = features.new_zeros(B, 1, r**3).scatter_add_(2, idx.unsqueeze(1), torch.ones_like(features[:, :1]))
    return (out / cnt.clamp_min(1)).view(B, C, r, r, r)


def trilinear_devoxelize(vox, coords, r):
    B, C = vox.shape[:2]
    flat = vox.reshape(B, C, -1)
    lo = coords.floor().long().clamp(0, r - 1)
    hi = (lo + 1).clamp(max=r - 1)
    frac = coords - lo
    out = 0
    for dx in (0, 1):
        for dy in (0, 1):
            for dz in (0, 1):
                ix = hi[:, 0] if dx else lo[:, 0]
                iy = hi[:, 1] if dy else lo[:, 1]
                iz = hi[:, 2] if dz else lo[:, 2]
                w = (frac[:, 0] if dx else 1 - frac[:, 0]) * (frac[:, 1] if dy else 1 - frac[:, 1])
                w = w * (frac[:, 2] if dz else 1 - frac[:, 2])
                idx = (ix * r + iy) * r + iz
                out = out + flat.gather(2, idx.unsqueeze(1).expand(-1, C, -1)) * w.unsqueeze(1)
    return out


class Voxelization(nn.Module):
    def __init__(self, resolution, eps=0.0):
        super().__init__()
        self.r, self.eps = resolution, eps

    def forward(self, features, coords):
        coords = coords.detach()
        norm_coords = coords - coords.mean(2, keepdim=True)
        norm_coords = (
            norm_coords
            / (norm_coords.norm(dim=1, keepdim=True).max(dim=2, keepdim=True).values * 2.0 + self.eps)
            + 0.5
        )
        norm_coords = torch.clamp(norm_coords * self.r, 0, self.r - 1)
        vox_coords = torch.round(norm_coords).long()
        return avg_voxelize(features, vox_coords, self.r), norm_coords


class SE3d(nn.Module):
    def __init__(self, channel, reduction=8):
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(channel, channel // reduction, bias=False),
            nn.ReLU(inplace=True),
            nn.Linear(channel // reduction, channel, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, inputs):
        return inputs * self.fc(inputs.mean(-1).mean(-1).mean(-1)).view(
            inputs.shape[0], inputs.shape[1], 1, 1, 1
        )


def shared_mlp(c_in, c_out):
    return nn.Sequential(nn.Conv1d(c_in, c_out, 1), nn.BatchNorm1d(c_out), nn.ReLU(True))


class PVConv(nn.Module):
    def __init__(self, c_in, c_out, kernel_size, resolution):
        super().__init__()
        self.resolution = resolution
        self.voxelization = Voxelization(resolution)
        self.voxel_layers = nn.Sequential(
            nn.Conv3d(c_in, c_out, kernel_size, stride=1, padding=kernel_size // 2),
            nn.BatchNorm3d(c_out, eps=1e-4),
            nn.LeakyReLU(0.1, True),
            nn.Conv3d(c_out, c_out, kernel_size, stride=1, padding=kernel_size // 2),
            nn.BatchNorm3d(c_out, eps=1e-4),
            nn.LeakyReLU(0.1, True),
            SE3d(c_out),
        )
        self.point_features = shared_mlp(c_in, c_out)

    def forward(self, inputs):
        features, coords = inputs
        voxel_features, voxel_coords = self.voxelization(features, coords)
        voxel_features = self.voxel_layers(voxel_features)
        voxel_features = trilinear_devoxelize(voxel_features, voxel_coords, self.resolution)
        return voxel_features + self.point_features(features), coords


class PointOnly(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.mlp = shared_mlp(c_in, c_out)

    def forward(self, inputs):
        return self.mlp(inputs[0]), inputs[1]


class PVCNN(nn.Module):
    blocks = ((64, 1, 32), (64, 2, 16), (128, 1, 16), (1024, 1, None))

    def __init__(self, extra_feature_channels=3):
        super().__init__()
        self.in_channels = extra_feature_channels + 3
        layers, c_in, concat = [], self.in_channels, 0
        for c_out, num_blocks, res in self.blocks:
            for _ in range(num_blocks):
                layers.append(PVConv(c_in, c_out, 3, res) if res is not None else PointOnly(c_in, c_out))
                c_in = c_out
                concat += c_out
        self.point_features = nn.ModuleList(layers)
        self.classifier = nn.Sequential(
            shared_mlp(concat + c_in + NUM_SHAPES, 256),
            nn.Dropout(0.2),
            shared_mlp(256, 256),
            nn.Dropout(0.2),
            shared_mlp(256, 128),
            nn.Conv1d(128, NUM_CLASSES, 1),
        )

    def forward(self, inputs):  # (B, 3 + 3 + 16, N)
        features = inputs[:, : self.in_channels, :]
        one_hot = inputs[:, -NUM_SHAPES:, :]
        num_points = features.size(-1)
        coords = features[:, :3, :]
        out_list = [one_hot]
        for layer in self.point_features:
            features, _ = layer((features, coords))
            out_list.append(features)
        out_list.append(features.max(dim=-1, keepdim=True).values.repeat([1, 1, num_points]))
        return self.classifier(torch.cat(out_list, dim=1))


# --- synthetic part-labelled clouds -------------------------------------------------------------------------
def make_clouds(b, n):
    cat = torch.randint(0, NUM_SHAPES, (b,), device=dev)
    u = torch.rand(b, n, 3, device=dev) * 2 - 1
    bend = (cat.float() / NUM_SHAPES).view(b, 1)
    xyz = torch.stack(
        [u[..., 0] * (1 + bend * u[..., 2]), u[..., 1] * 0.6, u[..., 2] + bend * u[..., 0] ** 2], -1
    )
    normals = F.normalize(torch.randn(b, n, 3, device=dev) + xyz, dim=-1)
    parts = torch.tensor(PARTS, device=dev)[cat].view(b, 1)
    band = ((u[..., 2] + 1) / 2 * parts).long().clamp(max=parts - 1)
    labels = torch.tensor(OFFSETS, device=dev)[cat].view(b, 1) + band
    one_hot = F.one_hot(cat, NUM_SHAPES).float().view(b, NUM_SHAPES, 1).expand(-1, -1, n)
    inputs = torch.cat([xyz.transpose(1, 2), normals.transpose(1, 2), one_hot], 1)
    return inputs.contiguous(), labels, cat


model = PVCNN().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)

# --- phase 1: training --------------------------------------------------------------------------------------
model.train()
for step in range(8):
    inputs, labels, _ = make_clouds(16, 2048)
    loss = F.cross_entropy(model(inputs), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
report("phase1 train 16x2048")

# --- phase 2: voting evaluation -----------------------------------------------------------------------------
model.eval()
with torch.no_grad():
    inputs, labels, cat = make_clouds(16, 2048)
    prob = 0
    for _ in range(4):
        scale = torch.empty(16, 3, 1, device=dev).uniform_(0.8, 1.25)
        x = torch.cat([inputs[:, :3] * scale, inputs[:, 3:]], 1)
        prob = prob + model(x).softmax(1)
    pred = prob.argmax(1)
    p1 = F.one_hot(pred, NUM_CLASSES).float()
    l1 = F.one_hot(labels, NUM_CLASSES).float()
    inter, union = (p1 * l1).sum(1), ((p1 + l1) > 0).float().sum(1)
    print("voting mIoU", (inter / union.clamp_min(1)).mean().item())
report("phase2 voting eval 16x2048")

# --- phase 3: dense scans -----------------------------------------------------------------------------------
with torch.no_grad():
    inputs, labels, _ = make_clouds(16, 16384)
    acc = (model(inputs).argmax(1) == labels).float().mean()
print("dense scan acc", acc.item())
report("phase3 dense scans 16x16384")
