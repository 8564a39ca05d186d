"""pixelNeRF after Yu et al. 2021 and the sxyu/pixel-nerf repository, written by hand on SRN-chairs-shaped
data (128 x 128 images, focal 131.25, cameras on a sphere of radius 1.3, near 0.8, far 1.8): the
SpatialEncoder (torchvision resnet34 from its config, no weights: conv1/bn1/relu, the first max pool,
layer1..layer3, each map upsampled bilinearly with align_corners=True to 64 x 64 and concatenated into
a 512-channel latent), points transformed into each source camera, projected (uv = -xy / z * focal +
c) and their features indexed by F.grid_sample (align_corners=True, padding border), positional
encoding of the camera-space points (6 frequencies) and view directions, the ResnetFC (5 residual
blocks of 512, the latent added through lin_z into the first 3, the source views averaged by
`combine_interleaved` at block 3), separate coarse and fine networks, NeRFRenderer's sampling (64
stratified coarse samples; 32 fine: 16 by inverse-CDF searchsorted of the coarse weights, 16 around
the coarse depth by randn), alpha compositing with a white background, points evaluated in splits
along the ray batch. fp16 autocast with a GradScaler; Adam (lr 1e-4) with the encoder and the two
MLPs as groups of their own (encoder lr 5e-5); 4 objects x 1,024 rays per batch from one source view
each; the first step its own phase, then 3 steps; then a novel view of one object rendered from 2
source views under no_grad and fp16 autocast in chunks of 4,096 rays; then the PSNR/SSIM-free
evaluation of 4 objects' coarse depth maps at 64 x 64 (coarse only); 4 phases after the setup."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17706)
if SMALL:
    IMG, SB, NV, RAYS, N_COARSE, N_FINE, N_FINE_DEPTH, HIDDEN, STEPS, CHUNK, EVAL_BATCH = (
        32,
        2,
        3,
        64,
        8,
        8,
        4,
        64,
        2,
        256,
        2048,
    )
else:
    IMG, SB, NV, RAYS, N_COARSE, N_FINE, N_FINE_DEPTH, HIDDEN, STEPS, CHUNK, EVAL_BATCH = (
        128,
        4,
        6,
        1024,
        64,
        32,
        16,
        512,
        4,
        4096,
        100000,
    )
FOCAL, Z_NEAR, Z_FAR, RADIUS = 131.25 * IMG / 128, 0.8, 1.8, 1.3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class SpatialEncoder(nn.Module):
    def __init__(self, num_layers=4):
        super().__init__()
        self.model = torchvision.models.resnet34(weights=None)
        self.model.fc = nn.Sequential()
        self.model.avgpool = nn.Sequential()
        self.num_layers = num_layers
        self.latent_size = [0, 64, 128, 256, 512, 1024][num_layers]
        self.register_buffer("latent", torch.empty(1, 1, 1, 1), persistent=False)
        self.register_buffer("latent_scaling", torch.empty(2, dtype=torch.float32), persistent=False)

    def index(self, uv, image_size):
        scale = self.latent_scaling / image_size
        uv = uv * scale - 1.0
        uv = uv.unsqueeze(2)
        samples = F.grid_sample(self.latent, uv, align_corners=True, mode="bilinear", padding_mode="border")
        return samples[:, :, :, 0]

    def forward(self, x):
        x = self.model.conv1(x)
        x = self.model.bn1(x)
        x = self.model.relu(x)
        latents = [x]
        x = self.model.maxpool(x)
        x = self.model.layer1(x)
        latents.append(x)
        x = self.model.layer2(x)
        latents.append(x)
        x = self.model.layer3(x)
        latents.append(x)
        latent_sz = latents[0].shape[-2:]
        for i in range(len(latents)):
            latents[i] = F.interpolate(latents[i], latent_sz, mode="bilinear", align_corners=True)
        self.latent = torch.cat(latents, dim=1)
        self.latent_scaling[0] = self.latent.shape[-1]
        self.latent_scaling[1] = self.latent.shape[-2]
        self.latent_scaling = self.latent_scaling / (self.latent_scaling - 1) * 2.0
        return self.latent


class PositionalEncoding(nn.Module):
    def __init__(self, num_freqs=6, d_in=3, freq_factor=math.pi):
        super().__init__()
        self.num_freqs, self.d_in = num_freqs, d_in
        self.freqs = freq_factor * 2.0 ** torch.arange(0, num_freqs)
        self.d_out = self.num_freqs * 2 * d_in + d_in
        self.register_buffer("_freqs", torch.repeat_interleave(self.freqs, 2).view(1, -1, 1))
        _phases = torch.zeros(2 * self.num_freqs)
        _phases[1::2] = math.pi * 0.5
        self.register_buffer("_phases", _phases.view(1, -1, 1))

    def forward(self, x):
        embed = x.unsqueeze(1).repeat(1, self.num_freqs * 2, 1)
        embed = torch.sin(torch.addcmul(self._phases, embed, self._freqs))
        embed = embed.view(x.shape[0], -1)
        return torch.cat((x, embed), dim=-1)


class ResnetBlockFC(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.fc_0 = nn.Linear(size, size)
        self.fc_1 = nn.Linear(size, size)
        nn.init.zeros_(self.fc_1.weight)
        self.activation = nn.ReLU()

    def forward(self, x):
        net = self.fc_0(self.activation(x))
        dx = self.fc_1(self.activation(net))
        return x + dx


class ResnetFC(nn.Module):
    def __init__(self, d_in, d_out=4, n_blocks=5, d_latent=512, d_hidden=512, combine_layer=3):
        super().__init__()
        self.lin_in = nn.Linear(d_in, d_hidden)
        self.lin_out = nn.Linear(d_hidden, d_out)
        self.n_blocks, self.d_latent, self.combine_layer = n_blocks, d_latent, combine_layer
        self.blocks = nn.ModuleList([ResnetBlockFC(d_hidden) for _ in range(n_blocks)])
        self.lin_z = nn.ModuleList([nn.Linear(d_latent, d_hidden) for _ in range(combine_layer)])
        self.activation = nn.ReLU()

    def forward(self, zx, combine_inner_dims):
        z, x = zx[..., : self.d_latent], zx[..., self.d_latent :]
        x = self.lin_in(x)
        for blkid in range(self.n_blocks):
            if blkid == self.combine_layer:
                x = x.reshape(-1, *combine_inner_dims, x.shape[-1]).mean(dim=1)
            if blkid < self.combine_layer:
                x = x + self.lin_z[blkid](z)
            x = self.blocks[blkid](x)
        return self.lin_out(self.activation(x))


class PixelNeRFNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = SpatialEncoder()
        self.code = PositionalEncoding()
        d_in = self.code.d_out + 3
        self.mlp_coarse = ResnetFC(d_in, d_latent=512, d_hidden=HIDDEN)
        self.mlp_fine = ResnetFC(d_in, d_latent=512, d_hidden=HIDDEN)
        self.register_buffer("poses", torch.empty(1, 3, 4), persistent=False)
        self.register_buffer("image_shape", torch.empty(2), persistent=False)

    def encode(self, images, poses, focal, c):
        self.num_objs = images.size(0)
        self.num_views_per_obj = images.size(1)
        images = images.reshape(-1, *images.shape[2:])
        poses = poses.reshape(-1, 4, 4)
        rot = poses[:, :3, :3].transpose(1, 2)
        trans = -torch.bmm(rot, poses[:, :3, 3:])
        self.poses = torch.cat((rot, trans), dim=-1)
        self.image_shape[0] = images.shape[-1]
        self.image_shape[1] = images.shape[-2]
        self.focal, self.c = focal, c
        self.encoder(images)

    def forward(self, xyz, coarse=True, viewdirs=None):
        SB, B, _ = xyz.shape
        NS = self.num_views_per_obj
        xyz = torch.repeat_interleave(xyz, NS, dim=0)
        xyz_rot = torch.matmul(self.poses[:, None, :3, :3], xyz.unsqueeze(-1))[..., 0]
        xyz = xyz_rot + self.poses[:, None, :3, 3]
        z_feature = self.code(xyz_rot.reshape(-1, 3))
        viewdirs = torch.repeat_interleave(viewdirs, NS, dim=0).reshape(SB * NS, B, 3, 1)
        viewdirs = torch.matmul(self.poses[:, None, :3, :3], viewdirs)
        mlp_input = torch.cat((z_feature, viewdirs.reshape(-1, 3)), dim=1)
        uv = -xyz[:, :, :2] / xyz[:, :, 2:]
        uv = uv * self.focal + self.c
        latent = self.encoder.index(uv, self.image_shape)
        latent = latent.transpose(1, 2).reshape(-1, self.encoder.latent_size)
        mlp_input = torch.cat((latent, mlp_input), dim=-1)
        mlp = self.mlp_coarse if coarse else self.mlp_fine
        output = mlp(mlp_input, combine_inner_dims=(NS, B)).reshape(-1, B, 4)
        rgb, sigma = output[..., :3], output[..., 3:4]
        return torch.cat([torch.sigmoid(rgb), torch.relu(sigma)], dim=-1)


def sample_coarse(rays):
    step = 1.0 / N_COARSE
    B = rays.shape[0]
    z_steps = torch.linspace(0, 1 - step, N_COARSE, device=rays.device).unsqueeze(0).repeat(B, 1)
    z_steps = z_steps + torch.rand_like(z_steps) * step
    return Z_NEAR * (1 - z_steps) + Z_FAR * z_steps


def sample_fine(rays, weights):
    B = rays.shape[0]
    weights = weights.detach() + 1e-5
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[:, :1]), cdf], -1)
    u = torch.rand(B, N_FINE - N_FINE_DEPTH, dtype=torch.float32, device=rays.device)
    inds = torch.searchsorted(cdf, u, right=True).float() - 1.0
    inds = torch.clamp_min(inds, 0.0)
    z_steps = (inds + torch.rand_like(inds)) / N_COARSE
    return Z_NEAR * (1 - z_steps) + Z_FAR * z_steps


def sample_fine_depth(depth):
    z_samp = depth.unsqueeze(1).repeat((1, N_FINE_DEPTH))
    z_samp = z_samp + torch.randn_like(z_samp) * 0.01
    return torch.max(torch.min(z_samp, torch.full_like(z_samp, Z_FAR)), torch.full_like(z_samp, Z_NEAR))


def composite(net, rays, z_samp, coarse, sb):
    B, K = z_samp.shape
    deltas = z_samp[:, 1:] - z_samp[:, :-1]
    deltas = torch.cat([deltas, torch.full_like(z_samp[:, :1], 1e10)], -1)
    points = rays[:, None, :3] + z_samp.unsqueeze(2) * rays[:, None, 3:6]
    points = points.reshape(sb, -1, 3)
    viewdirs = rays[:, None, 3:6].expand(-1, K, -1).reshape(sb, -1, 3)
    eval_batch_size = (EVAL_BATCH - 1) // sb + 1
    split_points = torch.split(points, eval_batch_size, dim=1)
    split_viewdirs = torch.split(viewdirs, eval_batch_size, dim=1)
    val_all = [
        net(pnts, coarse=coarse, viewdirs=dirs)
        for pnts, dirs in zip(split_points, split_viewdirs, strict=True)
    ]
    out = torch.cat(val_all, dim=1).reshape(B, K, -1).float()
    rgbs, sigmas = out[..., :3], out[..., 3]
    alphas = 1 - torch.exp(-deltas * torch.relu(sigmas))
    alphas_shifted = torch.cat([torch.ones_like(alphas[:, :1]), 1 - alphas + 1e-10], -1)
    T = torch.cumprod(alphas_shifted, -1)
    weights = alphas * T[:, :-1]
    rgb_final = torch.sum(weights.unsqueeze(-1) * rgbs, -2)
    depth_final = torch.sum(weights * z_samp, -1)
    pix_alpha = weights.sum(dim=1)
    rgb_final = rgb_final + 1 - pix_alpha.unsqueeze(-1)
    return weights, rgb_final, depth_final


def render(net, rays, sb, fine=True):
    z_coarse = sample_coarse(rays)
    weights, rgb_c, depth_c = composite(net, rays, z_coarse, True, sb)
    if not fine:
        return rgb_c, depth_c, None
    z_fine = torch.cat([sample_fine(rays, weights), sample_fine_depth(depth_c)], -1)
    z_combine, _ = torch.sort(torch.cat([z_coarse, z_fine], -1), dim=-1)
    _, rgb_f, _ = composite(net, rays, z_combine, False, sb)
    return rgb_c, depth_c, rgb_f


def look_at(pos):
    back = pos / pos.norm()
    right = torch.linalg.cross(torch.tensor([0.0, 0.0, 1.0]), back)
    right = right / right.norm()
    up = torch.linalg.cross(back, right)
    c2w = torch.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, up, back, pos
    return c2w


def gen_rays(poses):
    num_images = poses.shape[0]
    lin_x = torch.linspace(-0.5 * IMG + 0.5, 0.5 * IMG - 0.5, IMG, device=device)
    yy, xx = torch.meshgrid(-lin_x, lin_x, indexing="ij")
    cam_unproj = torch.stack((xx / FOCAL, yy / FOCAL, -torch.ones_like(xx)), -1).unsqueeze(0)
    cam_unproj = cam_unproj.unsqueeze(-1).repeat(num_images, 1, 1, 1, 1)
    cam_nviews = (poses[:, None, None, :3, :3] @ cam_unproj)[..., 0]
    cam_nviews = cam_nviews / torch.norm(cam_nviews, dim=-1, keepdim=True)
    cam_centers = poses[:, None, None, :3, 3].expand(-1, IMG, IMG, -1)
    cam_nears = torch.tensor(Z_NEAR, device=device).view(1, 1, 1, 1).expand(num_images, IMG, IMG, -1)
    cam_fars = torch.tensor(Z_FAR, device=device).view(1, 1, 1, 1).expand(num_images, IMG, IMG, -1)
    return torch.cat((cam_centers, cam_nviews, cam_nears, cam_fars), dim=-1)


angles = torch.rand(SB, NV, 2) * torch.tensor([2 * math.pi, 1.0]) + torch.tensor([0.0, 0.2])
all_poses = torch.stack(
    [
        torch.stack(
            [
                look_at(
                    RADIUS * torch.tensor([math.cos(a) * math.cos(e), math.sin(a) * math.cos(e), math.sin(e)])
                )
                for a, e in angles[s].tolist()
            ]
        )
        for s in range(SB)
    ]
).to(device)
all_images = torch.rand(SB, NV, 3, IMG, IMG, device=device) * 2 - 1
focal = torch.tensor(FOCAL, device=device)
c = torch.tensor([IMG / 2, IMG / 2], device=device)

net = PixelNeRFNet().to(device)
optim = torch.optim.Adam(
    [
        {"params": net.encoder.parameters(), "lr": 5e-5},
        {"params": net.mlp_coarse.parameters()},
        {"params": net.mlp_fine.parameters()},
    ],
    lr=1e-4,
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"params {sum(p.numel() for p in net.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS):
    net.train()
    src_view = torch.randint(0, NV, (SB, 1), device=device)
    all_rays, all_rgb_gt = [], []
    for obj_idx in range(SB):
        cam_rays = gen_rays(all_poses[obj_idx]).reshape(-1, 8)
        rgb_gt_all = (all_images[obj_idx] * 0.5 + 0.5).permute(0, 2, 3, 1).reshape(-1, 3)
        pix_inds = torch.randint(0, NV * IMG * IMG, (RAYS,), device=device)
        all_rgb_gt.append(rgb_gt_all[pix_inds])
        all_rays.append(cam_rays[pix_inds])
    all_rays = torch.stack(all_rays)[..., :6].reshape(-1, 6)
    all_rgb_gt = torch.stack(all_rgb_gt).reshape(-1, 3)
    src_images = torch.gather(all_images, 1, src_view[:, :, None, None, None].expand(-1, -1, 3, IMG, IMG))
    src_poses = torch.gather(all_poses, 1, src_view[:, :, None, None].expand(-1, -1, 4, 4))
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        net.encode(src_images, src_poses, focal, c)
        rgb_c, _, rgb_f = render(net, all_rays, SB)
        loss = F.mse_loss(rgb_c, all_rgb_gt) + F.mse_loss(rgb_f, all_rgb_gt)
    optim.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optim)
    scaler.update()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del rgb_c, rgb_f, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

net.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    net.encode(all_images[:1, :2], all_poses[:1, :2], focal, c)
    test_rays = gen_rays(all_poses[0, 2:3]).reshape(-1, 8)[:, :6]
    rgbs = [render(net, test_rays[i : i + CHUNK], 1)[2] for i in range(0, test_rays.shape[0], CHUNK)]
    novel = torch.cat(rgbs).reshape(IMG, IMG, 3)
    mse = F.mse_loss(novel, (all_images[0, 2] * 0.5 + 0.5).permute(1, 2, 0))
print(f"novel view {tuple(novel.shape)} psnr {(-10 * torch.log10(mse)).item():.2f}")
if device == "cuda":
    print(f"novel peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    net.encode(all_images[:, :1], all_poses[:, :1], focal, c)
    rays = gen_rays(all_poses[:, 1]).reshape(SB, IMG, IMG, 8)[:, ::2, ::2, :6].reshape(-1, 6)
    _, depth, _ = render(net, rays, SB, fine=False)
    depth = depth.reshape(SB, IMG // 2, IMG // 2)
print(f"depth maps {tuple(depth.shape)} mean {depth.float().mean().item():.3f}")
if device == "cuda":
    print(
        f"depth allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
