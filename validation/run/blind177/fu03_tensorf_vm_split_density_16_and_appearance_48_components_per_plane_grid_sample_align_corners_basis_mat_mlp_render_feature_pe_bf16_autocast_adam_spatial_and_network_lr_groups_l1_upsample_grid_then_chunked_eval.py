"""TensoRF after Chen et al. 2022 and the apchenstu/TensoRF repository's TensorVMSplit, written by
hand: the vector-matrix decomposition of the density (16 components per plane/line pair) and the
appearance (48 per pair) over three planes (XY, XZ, YZ) and three lines, starting from a 128^3 grid
on the [-1.5, 1.5]^3 box; features by F.grid_sample (align_corners=True) of the planes and lines at
each sample's coordinates, the density by softplus with shift -10, the appearance through the
basis_mat (Linear(144, 27, bias=False)) and MLPRender_Fea (positional encodings of the features and
view directions, 2 frequencies each; 128-wide hidden layers), `sample_ray` by the box's intersection
(step ratio 0.5: 440 samples per ray at 128^3, every sample kept: no alpha mask, no ray filtering),
alpha compositing (exclusive cumprod), the L1 regularizer on the density planes and lines. The
network side under bf16 autocast (grid_sample runs in fp32 there); Adam (betas 0.9/0.99) with
TensoRF's four parameter groups (density and appearance grids lr 0.02, basis_mat and render MLP lr
1e-3) decayed per step by lr_factor; 4,096 rays per batch. The first step its own phase, then 3
steps; then `upsample_volume_grid` to 192^3 (planes and lines by F.interpolate bilinear with
align_corners=True into new Parameters, 662 samples per ray) and the optimizer built anew, 2 steps;
then a 400 x 400 test view rendered under no_grad in chunks of 8,192 rays (rgb and depth maps); 4
phases after the setup."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17703)
if SMALL:
    RESO, RESO_UP, N_RAYS, STEPS, IMG, CHUNK, FEAT_C = 16, 24, 64, 2, 16, 128, 16
else:
    RESO, RESO_UP, N_RAYS, STEPS, IMG, CHUNK, FEAT_C = 128, 192, 4096, 4, 400, 8192, 128
DENSITY_COMP, APP_COMP, APP_DIM = [16, 16, 16], [48, 48, 48], 27
MAT_MODE, VEC_MODE = [[0, 1], [0, 2], [1, 2]], [2, 1, 0]
STEP_RATIO, DISTANCE_SCALE, DENSITY_SHIFT = 0.5, 25.0, -10.0
device = "cuda" if torch.cuda.is_available() else "cpu"
aabb = torch.tensor([[-1.5, -1.5, -1.5], [1.5, 1.5, 1.5]], device=device)


def positional_encoding(positions, freqs):
    freq_bands = (2 ** torch.arange(freqs).float()).to(positions.device)
    pts = (positions[..., None] * freq_bands).reshape((*positions.shape[:-1], freqs * positions.shape[-1]))
    return torch.cat([torch.sin(pts), torch.cos(pts)], dim=-1)


class MLPRender_Fea(nn.Module):
    def __init__(self, inChanel, viewpe=2, feape=2, featureC=128):
        super().__init__()
        self.in_mlpC = 2 * viewpe * 3 + 2 * feape * inChanel + 3 + inChanel
        self.viewpe, self.feape = viewpe, feape
        layer3 = nn.Linear(featureC, 3)
        self.mlp = nn.Sequential(
            nn.Linear(self.in_mlpC, featureC),
            nn.ReLU(inplace=True),
            nn.Linear(featureC, featureC),
            nn.ReLU(inplace=True),
            layer3,
        )
        nn.init.constant_(self.mlp[-1].bias, 0)

    def forward(self, viewdirs, features):
        indata = [features, viewdirs]
        indata += [positional_encoding(features, self.feape)]
        indata += [positional_encoding(viewdirs, self.viewpe)]
        return torch.sigmoid(self.mlp(torch.cat(indata, dim=-1)))


class TensorVMSplit(nn.Module):
    def __init__(self, reso):
        super().__init__()
        self.update_stepSize([reso] * 3)
        self.density_plane, self.density_line = self.init_one_svd(DENSITY_COMP, self.gridSize, 0.1)
        self.app_plane, self.app_line = self.init_one_svd(APP_COMP, self.gridSize, 0.1)
        self.basis_mat = nn.Linear(sum(APP_COMP), APP_DIM, bias=False)
        self.renderModule = MLPRender_Fea(APP_DIM, featureC=FEAT_C)

    def update_stepSize(self, gridSize):
        self.aabbSize = aabb[1] - aabb[0]
        self.invaabbSize = 2.0 / self.aabbSize
        self.gridSize = torch.LongTensor(gridSize).to(device)
        self.units = self.aabbSize / (self.gridSize - 1)
        self.stepSize = torch.mean(self.units) * STEP_RATIO
        self.aabbDiag = torch.sqrt(torch.sum(torch.square(self.aabbSize)))
        self.nSamples = int((self.aabbDiag / self.stepSize).item()) + 1

    def init_one_svd(self, n_component, gridSize, scale):
        plane_coef, line_coef = [], []
        for i in range(len(VEC_MODE)):
            vec_id = VEC_MODE[i]
            mat_id_0, mat_id_1 = MAT_MODE[i]
            plane_coef.append(
                nn.Parameter(scale * torch.randn((1, n_component[i], gridSize[mat_id_1], gridSize[mat_id_0])))
            )
            line_coef.append(nn.Parameter(scale * torch.randn((1, n_component[i], gridSize[vec_id], 1))))
        return nn.ParameterList(plane_coef).to(device), nn.ParameterList(line_coef).to(device)

    def get_optparam_groups(self, lr_init_spatialxyz=0.02, lr_init_network=0.001):
        return [
            {"params": self.density_line, "lr": lr_init_spatialxyz},
            {"params": self.density_plane, "lr": lr_init_spatialxyz},
            {"params": self.app_line, "lr": lr_init_spatialxyz},
            {"params": self.app_plane, "lr": lr_init_spatialxyz},
            {"params": self.basis_mat.parameters(), "lr": lr_init_network},
            {"params": self.renderModule.parameters(), "lr": lr_init_network},
        ]

    def normalize_coord(self, xyz_sampled):
        return (xyz_sampled - aabb[0]) * self.invaabbSize - 1

    def density_L1(self):
        total = 0
        for idx in range(len(self.density_plane)):
            total = (
                total
                + torch.mean(torch.abs(self.density_plane[idx]))
                + torch.mean(torch.abs(self.density_line[idx]))
            )
        return total

    def _coords(self, xyz_sampled):
        coordinate_plane = (
            torch.stack(
                (xyz_sampled[..., MAT_MODE[0]], xyz_sampled[..., MAT_MODE[1]], xyz_sampled[..., MAT_MODE[2]])
            )
            .detach()
            .view(3, -1, 1, 2)
        )
        coordinate_line = torch.stack(
            (xyz_sampled[..., VEC_MODE[0]], xyz_sampled[..., VEC_MODE[1]], xyz_sampled[..., VEC_MODE[2]])
        )
        coordinate_line = torch.stack((torch.zeros_like(coordinate_line), coordinate_line), dim=-1)
        return coordinate_plane, coordinate_line.detach().view(3, -1, 1, 2)

    def compute_densityfeature(self, xyz_sampled):
        coordinate_plane, coordinate_line = self._coords(xyz_sampled)
        sigma_feature = torch.zeros((xyz_sampled.shape[0],), device=xyz_sampled.device)
        for idx_plane in range(len(self.density_plane)):
            plane_coef_point = F.grid_sample(
                self.density_plane[idx_plane], coordinate_plane[[idx_plane]], align_corners=True
            ).view(-1, *xyz_sampled.shape[:1])
            line_coef_point = F.grid_sample(
                self.density_line[idx_plane], coordinate_line[[idx_plane]], align_corners=True
            ).view(-1, *xyz_sampled.shape[:1])
            sigma_feature = sigma_feature + torch.sum(plane_coef_point * line_coef_point, dim=0)
        return sigma_feature

    def compute_appfeature(self, xyz_sampled):
        coordinate_plane, coordinate_line = self._coords(xyz_sampled)
        plane_coef_point, line_coef_point = [], []
        for idx_plane in range(len(self.app_plane)):
            plane_coef_point.append(
                F.grid_sample(
                    self.app_plane[idx_plane], coordinate_plane[[idx_plane]], align_corners=True
                ).view(-1, *xyz_sampled.shape[:1])
            )
            line_coef_point.append(
                F.grid_sample(
                    self.app_line[idx_plane], coordinate_line[[idx_plane]], align_corners=True
                ).view(-1, *xyz_sampled.shape[:1])
            )
        plane_coef_point, line_coef_point = torch.cat(plane_coef_point), torch.cat(line_coef_point)
        return self.basis_mat((plane_coef_point * line_coef_point).T)

    @torch.no_grad()
    def upsample_volume_grid(self, res_target):
        for planes, lines in ((self.app_plane, self.app_line), (self.density_plane, self.density_line)):
            for i in range(len(VEC_MODE)):
                vec_id = VEC_MODE[i]
                mat_id_0, mat_id_1 = MAT_MODE[i]
                planes[i] = nn.Parameter(
                    F.interpolate(
                        planes[i].data,
                        size=(res_target[mat_id_1], res_target[mat_id_0]),
                        mode="bilinear",
                        align_corners=True,
                    )
                )
                lines[i] = nn.Parameter(
                    F.interpolate(
                        lines[i].data, size=(res_target[vec_id], 1), mode="bilinear", align_corners=True
                    )
                )
        self.update_stepSize(res_target)

    def sample_ray(self, rays_o, rays_d, is_train=True):
        N_samples = self.nSamples
        stepsize = self.stepSize
        vec = torch.where(rays_d == 0, torch.full_like(rays_d, 1e-6), rays_d)
        rate_a = (aabb[1] - rays_o) / vec
        rate_b = (aabb[0] - rays_o) / vec
        t_min = torch.minimum(rate_a, rate_b).amax(-1).clamp(min=2.0, max=6.0)
        rng = torch.arange(N_samples, device=rays_o.device)[None].float()
        if is_train:
            rng = rng.repeat(rays_d.shape[-2], 1)
            rng = rng + torch.rand_like(rng[:, [0]])
        step = stepsize * rng
        interpx = t_min[..., None] + step
        rays_pts = rays_o[..., None, :] + rays_d[..., None, :] * interpx[..., None]
        return rays_pts, interpx

    def forward(self, rays_chunk, is_train=True):
        viewdirs = rays_chunk[:, 3:6]
        xyz_sampled, z_vals = self.sample_ray(rays_chunk[:, :3], viewdirs, is_train=is_train)
        dists = torch.cat((z_vals[:, 1:] - z_vals[:, :-1], torch.zeros_like(z_vals[:, :1])), dim=-1)
        rays_norm = torch.norm(viewdirs, dim=-1, keepdim=True)
        dists = dists * rays_norm
        viewdirs = viewdirs / rays_norm
        viewdirs = viewdirs.view(-1, 1, 3).expand(xyz_sampled.shape)
        xyz_sampled = self.normalize_coord(xyz_sampled)
        pts = xyz_sampled.reshape(-1, 3)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            sigma_feature = self.compute_densityfeature(pts)
            sigma = F.softplus(sigma_feature.float() + DENSITY_SHIFT).view(xyz_sampled.shape[:-1])
            app_features = self.compute_appfeature(pts)
            rgb = self.renderModule(viewdirs.reshape(-1, 3), app_features).float().view(xyz_sampled.shape)
        alpha = 1.0 - torch.exp(-sigma * dists * DISTANCE_SCALE)
        T = torch.cumprod(
            torch.cat([torch.ones(alpha.shape[0], 1, device=alpha.device), 1.0 - alpha + 1e-10], -1), -1
        )
        weight = alpha * T[:, :-1]
        acc_map = torch.sum(weight, -1)
        rgb_map = torch.sum(weight[..., None] * rgb, -2)
        rgb_map = (rgb_map + (1.0 - acc_map[..., None])).clamp(0, 1)
        depth_map = torch.sum(weight * z_vals, -1)
        return rgb_map, depth_map


def random_rays(n):
    theta = torch.rand(n, device=device) * 2 * math.pi
    o = torch.stack([4.0 * torch.cos(theta), 4.0 * torch.sin(theta), torch.full_like(theta, 0.5)], -1)
    d = (torch.rand(n, 3, device=device) - 0.5) - o
    return torch.cat([o, d / d.norm(dim=-1, keepdim=True)], -1)


tensorf = TensorVMSplit(RESO).to(device)
lr_factor = 0.1 ** (1 / 30000)
optimizer = torch.optim.Adam(tensorf.get_optparam_groups(), betas=(0.9, 0.99))
print(f"params {sum(p.numel() for p in tensorf.parameters())} samples {tensorf.nSamples}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(step):
    rays_train = random_rays(N_RAYS)
    rgb_train = torch.rand(N_RAYS, 3, device=device)
    rgb_map, _ = tensorf(rays_train, is_train=True)
    loss = torch.mean((rgb_map - rgb_train) ** 2)
    total_loss = loss + 8e-5 * tensorf.density_L1()
    optimizer.zero_grad()
    total_loss.backward()
    optimizer.step()
    for param_group in optimizer.param_groups:
        param_group["lr"] = param_group["lr"] * lr_factor
    return loss.item()


for step in range(STEPS):
    loss = train_step(step)
    print(f"step {step} mse {loss:.4f} psnr {-10.0 * math.log10(max(loss, 1e-10)):.2f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

tensorf.upsample_volume_grid([RESO_UP] * 3)
lr_scale = 1.0
optimizer = torch.optim.Adam(
    tensorf.get_optparam_groups(0.02 * lr_scale, 0.001 * lr_scale), betas=(0.9, 0.99)
)
print(f"upsampled to {RESO_UP}^3, samples {tensorf.nSamples}")
for step in range(STEPS, STEPS + 2):
    loss = train_step(step)
    print(f"step {step} mse {loss:.4f}")
if device == "cuda":
    print(f"upsample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    lin = torch.linspace(-1, 1, IMG, device=device)
    u, v = torch.meshgrid(lin, lin, indexing="xy")
    dirs = torch.stack([u * 0.36, -v * 0.36, -torch.ones_like(u)], -1).reshape(-1, 3)
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    rays = torch.cat([torch.tensor([0.0, 0.0, 4.0], device=device).expand(dirs.shape), dirs], -1)
    rgbs, depths = [], []
    for chunk_idx in range(0, rays.shape[0], CHUNK):
        rgb_map, depth_map = tensorf(rays[chunk_idx : chunk_idx + CHUNK], is_train=False)
        rgbs.append(rgb_map)
        depths.append(depth_map)
    rgb_map, depth_map = torch.cat(rgbs).reshape(IMG, IMG, 3), torch.cat(depths).reshape(IMG, IMG)
print(f"test view {tuple(rgb_map.shape)} depth {depth_map.mean().item():.3f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
