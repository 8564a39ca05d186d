"""3-D Gaussian splatting with the rasterizer in plain PyTorch as hbb1/torch-splatting
(gauss_render.py) writes it: 16,384 Gaussians (means in a 2.4-wide cube, log scales, unit
quaternions built into rotation matrices, 3-D covariances R S S^T R^T, opacity logits, degree-3
spherical-harmonic colours: 1 DC and 15 rest coefficients a channel), a pinhole camera at radius
3.5 (fov 60 degrees) looking at the origin; the means projected by the view and projection
matrices, those in front of the near plane kept by a boolean mask, the 2-D covariances by the
Jacobian J W Sigma W^T J^T plus a 0.3-pixel filter, radii from the 2 x 2 eigenvalues (3 sigma,
ceil), screen rectangles; the 256 x 256 image in 64 x 64 tiles, each tile's Gaussians found by its
rectangle overlap (a boolean mask over all Gaussians), sorted by depth (torch.sort), their conics by
torch.inverse of the 2 x 2 covariances, per-pixel Gaussian weights over (4,096 pixels, P), alpha
clipped at 0.99, the transmittance by cumprod over 1 - alpha, colour, depth and alpha accumulated
and written into the image by slice assignment. The loss is 3DGS's 0.8 L1 + 0.2 (1 - SSIM) with an
11 x 11 Gaussian window (grouped conv2d). fp32, Adam (eps 1e-15) with 3DGS's parameter groups
(means 1.6e-4, DC colour 2.5e-3, rest 1.25e-4, opacity 0.05, scales 5e-3, rotations 1e-3), the
viewspace-gradient statistics for densification accumulated from the 2-D means' retained grad,
3 steps from three views (each its own phase), then two held-out views rendered under no_grad
with PSNR; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16206)
if SMALL:
    N_GAUSS, IMG, TILE, STEPS, EVAL_VIEWS = 256, 32, 16, 3, 2
else:
    N_GAUSS, IMG, TILE, STEPS, EVAL_VIEWS = 16384, 256, 64, 3, 2
device = "cuda" if torch.cuda.is_available() else "cpu"

FOV = math.radians(60.0)
C0 = 0.28209479177387814
C1 = 0.4886025119029199
C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396]
C3 = [-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154, -0.4570457994644658,
      1.445305721320277, -0.5900435899266435]  # fmt: skip


def eval_sh(deg, sh, dirs):
    result = C0 * sh[..., 0]
    if deg > 0:
        x, y, z = dirs[..., 0:1], dirs[..., 1:2], dirs[..., 2:3]
        result = result - C1 * y * sh[..., 1] + C1 * z * sh[..., 2] - C1 * x * sh[..., 3]
        if deg > 1:
            xx, yy, zz = x * x, y * y, z * z
            xy, yz, xz = x * y, y * z, x * z
            result = (
                result
                + C2[0] * xy * sh[..., 4]
                + C2[1] * yz * sh[..., 5]
                + C2[2] * (2.0 * zz - xx - yy) * sh[..., 6]
                + C2[3] * xz * sh[..., 7]
                + C2[4] * (xx - yy) * sh[..., 8]
            )
            if deg > 2:
                result = (
                    result
                    + C3[0] * y * (3 * xx - yy) * sh[..., 9]
                    + C3[1] * xy * z * sh[..., 10]
                    + C3[2] * y * (4 * zz - xx - yy) * sh[..., 11]
                    + C3[3] * z * (2 * zz - 3 * xx - 3 * yy) * sh[..., 12]
                    + C3[4] * x * (4 * zz - xx - yy) * sh[..., 13]
                    + C3[5] * z * (xx - yy) * sh[..., 14]
                    + C3[6] * x * (xx - 3 * yy) * sh[..., 15]
                )
    return result


def inverse_sigmoid(x):
    return torch.log(x / (1 - x))


def build_rotation(r):
    norm = torch.sqrt(r[:, 0] * r[:, 0] + r[:, 1] * r[:, 1] + r[:, 2] * r[:, 2] + r[:, 3] * r[:, 3])
    q = r / norm[:, None]
    R = torch.zeros((q.size(0), 3, 3), device=r.device)
    r, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    R[:, 0, 0] = 1 - 2 * (y * y + z * z)
    R[:, 0, 1] = 2 * (x * y - r * z)
    R[:, 0, 2] = 2 * (x * z + r * y)
    R[:, 1, 0] = 2 * (x * y + r * z)
    R[:, 1, 1] = 1 - 2 * (x * x + z * z)
    R[:, 1, 2] = 2 * (y * z - r * x)
    R[:, 2, 0] = 2 * (x * z - r * y)
    R[:, 2, 1] = 2 * (y * z + r * x)
    R[:, 2, 2] = 1 - 2 * (x * x + y * y)
    return R


def build_scaling_rotation(s, r):
    L = torch.zeros((s.shape[0], 3, 3), dtype=torch.float, device=s.device)
    R = build_rotation(r)
    L[:, 0, 0] = s[:, 0]
    L[:, 1, 1] = s[:, 1]
    L[:, 2, 2] = s[:, 2]
    L = R @ L
    return L


def build_covariance_3d(s, r):
    L = build_scaling_rotation(s, r)
    return L @ L.transpose(1, 2)


def homogeneous(points):
    return torch.cat([points, torch.ones_like(points[..., :1])], dim=-1)


def projection_ndc(points, viewmatrix, projmatrix):
    points_o = homogeneous(points)
    points_h = points_o @ viewmatrix @ projmatrix
    p_w = 1.0 / (points_h[..., -1:] + 0.000001)
    p_proj = points_h * p_w
    p_view = points_o @ viewmatrix
    in_mask = p_view[..., 2] >= 0.2
    return p_proj, p_view, in_mask


def build_covariance_2d(mean3d, cov3d, viewmatrix, fov_x, fov_y, focal_x, focal_y):
    tan_fovx = math.tan(fov_x * 0.5)
    tan_fovy = math.tan(fov_y * 0.5)
    t = (mean3d @ viewmatrix[:3, :3]) + viewmatrix[-1:, :3]
    tx = (t[..., 0] / t[..., 2]).clip(min=-tan_fovx * 1.3, max=tan_fovx * 1.3) * t[..., 2]
    ty = (t[..., 1] / t[..., 2]).clip(min=-tan_fovy * 1.3, max=tan_fovy * 1.3) * t[..., 2]
    tz = t[..., 2]
    J = torch.zeros(mean3d.shape[0], 3, 3).to(mean3d)
    J[..., 0, 0] = 1 / tz * focal_x
    J[..., 0, 2] = -tx / (tz * tz) * focal_x
    J[..., 1, 1] = 1 / tz * focal_y
    J[..., 1, 2] = -ty / (tz * tz) * focal_y
    W = viewmatrix[:3, :3].T
    cov2d = J @ W @ cov3d @ W.T @ J.permute(0, 2, 1)
    filter = torch.eye(2, 2).to(cov2d) * 0.3
    return cov2d[:, :2, :2] + filter[None]


def get_radius(cov2d):
    det = cov2d[:, 0, 0] * cov2d[:, 1, 1] - cov2d[:, 0, 1] * cov2d[:, 1, 0]
    mid = 0.5 * (cov2d[:, 0, 0] + cov2d[:, 1, 1])
    lambda1 = mid + torch.sqrt((mid**2 - det).clip(min=0.1))
    lambda2 = mid - torch.sqrt((mid**2 - det).clip(min=0.1))
    return 3.0 * torch.sqrt(torch.max(lambda1, lambda2)).ceil()


def get_rect(pix_coord, radii, width, height):
    rect_min = pix_coord - radii[:, None]
    rect_max = pix_coord + radii[:, None]
    rect_min[..., 0] = rect_min[..., 0].clip(0, width - 1.0)
    rect_min[..., 1] = rect_min[..., 1].clip(0, height - 1.0)
    rect_max[..., 0] = rect_max[..., 0].clip(0, width - 1.0)
    rect_max[..., 1] = rect_max[..., 1].clip(0, height - 1.0)
    return rect_min, rect_max


class Camera:
    def __init__(self, theta, phi, radius=3.5, fov=FOV, size=IMG):
        self.image_width = self.image_height = size
        self.FoVx = self.FoVy = fov
        self.focal_x = self.focal_y = size / (2 * math.tan(fov / 2))
        eye = torch.tensor(
            [
                radius * math.cos(phi) * math.sin(theta),
                radius * math.sin(phi),
                radius * math.cos(phi) * math.cos(theta),
            ]
        )
        forward = F.normalize(-eye, dim=0)
        right = F.normalize(torch.linalg.cross(forward, torch.tensor([0.0, 1.0, 0.0])), dim=0)
        up = torch.linalg.cross(right, forward)
        R = torch.stack([right, -up, forward], dim=1)  # world -> camera columns (OpenCV)
        view = torch.eye(4)
        view[:3, :3] = R
        view[3, :3] = -eye @ R
        znear, zfar = 0.01, 100.0
        tan_half = math.tan(fov / 2)
        proj = torch.zeros(4, 4)
        proj[0, 0] = 1 / tan_half
        proj[1, 1] = 1 / tan_half
        proj[2, 2] = zfar / (zfar - znear)
        proj[2, 3] = 1.0
        proj[3, 2] = -(zfar * znear) / (zfar - znear)
        self.world_view_transform = view.to(device)
        self.projection_matrix = proj.to(device)
        self.camera_center = eye.to(device)


class GaussRenderer(nn.Module):
    def __init__(self, active_sh_degree=3, white_bkgd=True):
        super().__init__()
        self.active_sh_degree = active_sh_degree
        self.white_bkgd = white_bkgd
        self.pix_coord = torch.stack(
            torch.meshgrid(torch.arange(IMG), torch.arange(IMG), indexing="xy"), dim=-1
        ).to(device)

    def build_color(self, means3D, shs, camera):
        rays_o = camera.camera_center
        rays_d = means3D - rays_o
        color = eval_sh(self.active_sh_degree, shs.permute(0, 2, 1), rays_d)
        color = (color + 0.5).clip(min=0.0)
        return color

    def render(self, camera, means2D, cov2d, color, opacity, depths):
        radii = get_radius(cov2d)
        rect = get_rect(means2D, radii, width=camera.image_width, height=camera.image_height)
        self.render_color = torch.ones(*self.pix_coord.shape[:2], 3).to(device)
        self.render_depth = torch.zeros(*self.pix_coord.shape[:2], 1).to(device)
        self.render_alpha = torch.zeros(*self.pix_coord.shape[:2], 1).to(device)
        for h in range(0, camera.image_height, TILE):
            for w in range(0, camera.image_width, TILE):
                over_tl = rect[0][..., 0].clip(min=w), rect[0][..., 1].clip(min=h)
                over_br = rect[1][..., 0].clip(max=w + TILE - 1), rect[1][..., 1].clip(max=h + TILE - 1)
                in_mask = (over_br[0] > over_tl[0]) & (over_br[1] > over_tl[1])
                if not in_mask.sum() > 0:
                    continue
                tile_coord = self.pix_coord[h : h + TILE, w : w + TILE].flatten(0, -2)
                sorted_depths, index = torch.sort(depths[in_mask])
                sorted_means2D = means2D[in_mask][index]
                sorted_cov2d = cov2d[in_mask][index]
                sorted_conic = sorted_cov2d.inverse()
                sorted_opacity = opacity[in_mask][index]
                sorted_color = color[in_mask][index]
                dx = tile_coord[:, None, :] - sorted_means2D[None, :]
                gauss_weight = torch.exp(
                    -0.5
                    * (
                        dx[:, :, 0] ** 2 * sorted_conic[:, 0, 0]
                        + dx[:, :, 1] ** 2 * sorted_conic[:, 1, 1]
                        + dx[:, :, 0] * dx[:, :, 1] * sorted_conic[:, 0, 1]
                        + dx[:, :, 0] * dx[:, :, 1] * sorted_conic[:, 1, 0]
                    )
                )
                alpha = (gauss_weight[..., None] * sorted_opacity[None]).clip(max=0.99)
                T = torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1]], dim=1).cumprod(dim=1)
                acc_alpha = (alpha * T).sum(dim=1)
                tile_color = (T * alpha * sorted_color[None]).sum(dim=1) + (1 - acc_alpha) * (
                    1 if self.white_bkgd else 0
                )
                tile_depth = ((T * alpha) * sorted_depths[None, :, None]).sum(dim=1)
                self.render_color[h : h + TILE, w : w + TILE] = tile_color.reshape(TILE, TILE, -1)
                self.render_depth[h : h + TILE, w : w + TILE] = tile_depth.reshape(TILE, TILE, -1)
                self.render_alpha[h : h + TILE, w : w + TILE] = acc_alpha.reshape(TILE, TILE, -1)
        return {
            "render": self.render_color,
            "depth": self.render_depth,
            "alpha": self.render_alpha,
            "visiility_filter": radii > 0,
            "radii": radii,
        }

    def forward(self, camera, pc):
        means3D = pc.get_xyz
        opacity = pc.get_opacity
        scales = pc.get_scaling
        rotations = pc.get_rotation
        shs = pc.get_features
        mean_ndc, mean_view, in_mask = projection_ndc(
            means3D, viewmatrix=camera.world_view_transform, projmatrix=camera.projection_matrix
        )
        mean_ndc = mean_ndc[in_mask]
        mean_view = mean_view[in_mask]
        depths = mean_view[:, 2]
        color = self.build_color(means3D=means3D, shs=shs, camera=camera)
        cov3d = build_covariance_3d(scales, rotations)
        cov2d = build_covariance_2d(
            mean3d=means3D,
            cov3d=cov3d,
            viewmatrix=camera.world_view_transform,
            fov_x=camera.FoVx,
            fov_y=camera.FoVy,
            focal_x=camera.focal_x,
            focal_y=camera.focal_y,
        )
        mean_coord_x = ((mean_ndc[..., 0] + 1) * camera.image_width - 1.0) * 0.5
        mean_coord_y = ((mean_ndc[..., 1] + 1) * camera.image_height - 1.0) * 0.5
        means2D = torch.stack([mean_coord_x, mean_coord_y], dim=-1)
        if means2D.requires_grad:
            means2D.retain_grad()
        out = self.render(
            camera=camera, means2D=means2D, cov2d=cov2d, color=color, opacity=opacity, depths=depths
        )
        out["viewspace_points"] = means2D
        return out


class GaussModel(nn.Module):
    def __init__(self, n, sh_degree=3):
        super().__init__()
        self.max_sh_degree = sh_degree
        xyz = (torch.rand(n, 3) - 0.5) * 2.4
        fused_color = torch.rand(n, 3)
        features = torch.zeros((n, 3, (sh_degree + 1) ** 2))
        features[:, :3, 0] = (fused_color - 0.5) / C0
        scales = torch.log(torch.full((n, 3), 0.015) * (0.5 + torch.rand(n, 3)))
        rots = torch.zeros((n, 4))
        rots[:, 0] = 1
        opacities = inverse_sigmoid(0.1 * torch.ones((n, 1), dtype=torch.float))
        self._xyz = nn.Parameter(xyz.to(device))
        self._features_dc = nn.Parameter(features[:, :, 0:1].transpose(1, 2).contiguous().to(device))
        self._features_rest = nn.Parameter(features[:, :, 1:].transpose(1, 2).contiguous().to(device))
        self._scaling = nn.Parameter(scales.to(device))
        self._rotation = nn.Parameter(rots.to(device))
        self._opacity = nn.Parameter(opacities.to(device))
        self.max_radii2D = torch.zeros((n), device=device)
        self.xyz_gradient_accum = torch.zeros((n, 1), device=device)
        self.denom = torch.zeros((n, 1), device=device)

    @property
    def get_xyz(self):
        return self._xyz

    @property
    def get_features(self):
        return torch.cat((self._features_dc, self._features_rest), dim=1)

    @property
    def get_opacity(self):
        return torch.sigmoid(self._opacity)

    @property
    def get_scaling(self):
        return torch.exp(self._scaling)

    @property
    def get_rotation(self):
        return F.normalize(self._rotation)

    def add_densification_stats(self, viewspace_point_tensor, update_filter):
        self.xyz_gradient_accum[update_filter] += torch.norm(
            viewspace_point_tensor.grad[update_filter, :2], dim=-1, keepdim=True
        )
        self.denom[update_filter] += 1


def gaussian(window_size, sigma):
    gauss = torch.tensor(
        [math.exp(-((x - window_size // 2) ** 2) / float(2 * sigma**2)) for x in range(window_size)]
    )
    return gauss / gauss.sum()


def create_window(window_size, channel):
    _1D_window = gaussian(window_size, 1.5).unsqueeze(1)
    _2D_window = _1D_window.mm(_1D_window.t()).float().unsqueeze(0).unsqueeze(0)
    return _2D_window.expand(channel, 1, window_size, window_size).contiguous()


def ssim(img1, img2, window_size=11):
    channel = img1.size(-3)
    window = create_window(window_size, channel).to(img1.device).type_as(img1)
    mu1 = F.conv2d(img1, window, padding=window_size // 2, groups=channel)
    mu2 = F.conv2d(img2, window, padding=window_size // 2, groups=channel)
    mu1_sq, mu2_sq, mu1_mu2 = mu1.pow(2), mu2.pow(2), mu1 * mu2
    sigma1_sq = F.conv2d(img1 * img1, window, padding=window_size // 2, groups=channel) - mu1_sq
    sigma2_sq = F.conv2d(img2 * img2, window, padding=window_size // 2, groups=channel) - mu2_sq
    sigma12 = F.conv2d(img1 * img2, window, padding=window_size // 2, groups=channel) - mu1_mu2
    C1_, C2_ = 0.01**2, 0.03**2
    ssim_map = ((2 * mu1_mu2 + C1_) * (2 * sigma12 + C2_)) / (
        (mu1_sq + mu2_sq + C1_) * (sigma1_sq + sigma2_sq + C2_)
    )
    return ssim_map.mean()


gaussians = GaussModel(N_GAUSS)
renderer = GaussRenderer(active_sh_degree=3, white_bkgd=True)
spatial_lr_scale = 3.5
optimizer = torch.optim.Adam(
    [
        {"params": [gaussians._xyz], "lr": 0.00016 * spatial_lr_scale, "name": "xyz"},
        {"params": [gaussians._features_dc], "lr": 0.0025, "name": "f_dc"},
        {"params": [gaussians._features_rest], "lr": 0.0025 / 20.0, "name": "f_rest"},
        {"params": [gaussians._opacity], "lr": 0.05, "name": "opacity"},
        {"params": [gaussians._scaling], "lr": 0.005, "name": "scaling"},
        {"params": [gaussians._rotation], "lr": 0.001, "name": "rotation"},
    ],
    lr=0.0,
    eps=1e-15,
)
gt_images = torch.rand(STEPS, IMG, IMG, 3, device=device)
cameras = [Camera(2 * math.pi * i / STEPS, 0.3) for i in range(STEPS)]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

lambda_dssim = 0.2
for step in range(STEPS):
    camera = cameras[step]
    out = renderer(camera=camera, pc=gaussians)
    image = out["render"].permute(2, 0, 1)
    gt_image = gt_images[step].permute(2, 0, 1)
    l1 = torch.abs(image - gt_image).mean()
    loss = (1.0 - lambda_dssim) * l1 + lambda_dssim * (1.0 - ssim(image[None], gt_image[None]))
    loss.backward()
    with torch.no_grad():
        visibility_filter, radii = out["visiility_filter"], out["radii"]
        gaussians.max_radii2D[visibility_filter] = torch.max(
            gaussians.max_radii2D[visibility_filter], radii[visibility_filter]
        )
        gaussians.add_densification_stats(out["viewspace_points"], visibility_filter)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del out, image, loss, l1
psnrs = []
with torch.no_grad():
    for v in range(EVAL_VIEWS):
        camera = Camera(math.pi / 4 + math.pi * v, 0.1)
        out = renderer(camera=camera, pc=gaussians)
        mse = ((out["render"] - gt_images[0]) ** 2).mean()
        psnrs.append(-10.0 * torch.log10(mse))
    psnr = torch.stack(psnrs).mean()
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"eval psnr {psnr.item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
