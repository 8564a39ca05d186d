"""Diffusion Policy (Chi et al. 2023), CNN variant, written by hand after the reference
ConditionalUnet1D: the noisy action sequence (horizon 16, 10-dim actions: position, 6-D rotation,
gripper) is a 1-D signal (B, 10, 16) through a temporal UNet with down dims 256 / 512 / 1024, kernel 5,
Conv1dBlock = Conv1d + GroupNorm(8) + Mish, two ConditionalResidualBlock1D per level with FiLM
conditioning (Mish + Linear(cond, 2 * C) -> per-channel scale and bias), strided Conv1d(3, 2)
downsampling and ConvTranspose1d(4, 2) upsampling, skip connections concatenated, a final Conv1dBlock
and a 1x1 conv. The condition is the diffusion-step embedding (sinusoidal 128 -> Linear 512 -> Mish ->
Linear 128) concatenated with the global observation feature: 2 observation steps x 2 cameras (96 x 96,
uint8 on the host, pinned) through one torchvision ResNet-18 with GroupNorm(C // 16) and global average
pooling (512 each) plus the 9-dim proprioception per step: 2 * (2 * 512 + 9) = 2066 numbers.

DDPM with 100 steps and the squaredcos_cap_v2 (cosine) schedule, epsilon prediction, batch 256. Training
under bf16 autocast with fused AdamW (lr 1e-4, betas (0.95, 0.999), weight decay 1e-6) and an EMA of the
weights with the diffusers-style warm-up decay (1 - (1 + step / inv_gamma) ** -power, power 0.75) done with
torch._foreach_mul_ / torch._foreach_add_. Phases: the first step; 3 more steps; then action sampling
for 64 environments with the EMA model under torch.inference_mode in fp32: DDIM with 16 steps (eta 0)
starting from Gaussian noise, the first 8 actions of each chunk moved to the host. 3 phases."""

import copy
import itertools
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18902)
if SMALL:
    B, STEPS, N_ENV, DDIM_STEPS, RES, DIMS = 4, 1, 2, 2, 64, (32, 64, 128)
else:
    B, STEPS, N_ENV, DDIM_STEPS, RES, DIMS = 256, 3, 64, 16, 96, (256, 512, 1024)
HORIZON, ACT_DIM, OBS_STEPS, PROPRIO, N_ACT_EXEC = 16, 10, 2, 9, 8
T_TRAIN = 100
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half = self.dim // 2
        emb = math.log(10000) / (half - 1)
        emb = torch.exp(torch.arange(half, device=x.device) * -emb)
        emb = x[:, None].float() * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class Conv1dBlock(nn.Module):
    def __init__(self, cin, cout, k, groups=8):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv1d(cin, cout, k, padding=k // 2), nn.GroupNorm(groups, cout), nn.Mish()
        )

    def forward(self, x):
        return self.block(x)


class ConditionalResidualBlock1D(nn.Module):
    def __init__(self, cin, cout, cond_dim, k=5):
        super().__init__()
        self.blocks = nn.ModuleList([Conv1dBlock(cin, cout, k), Conv1dBlock(cout, cout, k)])
        self.out_channels = cout
        self.cond_encoder = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, cout * 2))
        self.residual_conv = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, cond):
        out = self.blocks[0](x)
        embed = self.cond_encoder(cond).reshape(cond.shape[0], 2, self.out_channels, 1)
        out = embed[:, 0] * out + embed[:, 1]
        out = self.blocks[1](out)
        return out + self.residual_conv(x)


class ConditionalUnet1D(nn.Module):
    def __init__(self, input_dim, global_cond_dim, step_dim=128, down_dims=(256, 512, 1024), k=5):
        super().__init__()
        all_dims = [input_dim, *down_dims]
        start = down_dims[0]
        self.step_encoder = nn.Sequential(
            SinusoidalPosEmb(step_dim),
            nn.Linear(step_dim, step_dim * 4),
            nn.Mish(),
            nn.Linear(step_dim * 4, step_dim),
        )
        cond_dim = step_dim + global_cond_dim
        in_out = list(itertools.pairwise(all_dims))
        mid = all_dims[-1]
        self.mid_modules = nn.ModuleList(
            [
                ConditionalResidualBlock1D(mid, mid, cond_dim, k),
                ConditionalResidualBlock1D(mid, mid, cond_dim, k),
            ]
        )
        self.down_modules = nn.ModuleList()
        for i, (din, dout) in enumerate(in_out):
            last = i >= len(in_out) - 1
            self.down_modules.append(
                nn.ModuleList(
                    [
                        ConditionalResidualBlock1D(din, dout, cond_dim, k),
                        ConditionalResidualBlock1D(dout, dout, cond_dim, k),
                        nn.Conv1d(dout, dout, 3, 2, 1) if not last else nn.Identity(),
                    ]
                )
            )
        self.up_modules = nn.ModuleList()
        for i, (din, dout) in enumerate(reversed(in_out[1:])):
            last = i >= len(in_out) - 1
            self.up_modules.append(
                nn.ModuleList(
                    [
                        ConditionalResidualBlock1D(dout * 2, din, cond_dim, k),
                        ConditionalResidualBlock1D(din, din, cond_dim, k),
                        nn.ConvTranspose1d(din, din, 4, 2, 1) if not last else nn.Identity(),
                    ]
                )
            )
        self.final_conv = nn.Sequential(Conv1dBlock(start, start, k), nn.Conv1d(start, input_dim, 1))

    def forward(self, sample, timestep, global_cond):
        x = sample.moveaxis(-1, -2)
        cond = torch.cat([self.step_encoder(timestep), global_cond], dim=-1)
        h = []
        for res1, res2, down in self.down_modules:
            x = res2(res1(x, cond), cond)
            h.append(x)
            x = down(x)
        for m in self.mid_modules:
            x = m(x, cond)
        for res1, res2, up in self.up_modules:
            x = torch.cat((x, h.pop()), dim=1)
            x = res2(res1(x, cond), cond)
            x = up(x)
        return self.final_conv(x).moveaxis(-1, -2)


class ObsEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        net = torchvision.models.resnet18(weights=None, norm_layer=lambda c: nn.GroupNorm(c // 16, c))
        net.fc = nn.Identity()
        self.backbone = net

    def forward(self, images, proprio):
        # images: (B, OBS_STEPS, cams, 3, H, W) uint8; proprio: (B, OBS_STEPS, 9)
        b = images.shape[0]
        x = images.flatten(0, 2).float() / 255.0
        x = (x - 0.5) / 0.5
        feat = self.backbone(x).reshape(b, OBS_STEPS, -1)
        return torch.cat([feat, proprio], dim=-1).flatten(1)


class DiffusionPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.obs_encoder = ObsEncoder()
        self.unet = ConditionalUnet1D(ACT_DIM, OBS_STEPS * (2 * 512 + PROPRIO), down_dims=DIMS)


def squaredcos_betas(n, max_beta=0.999):
    def abar(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    return torch.tensor(
        [min(1 - abar((i + 1) / n) / abar(i / n), max_beta) for i in range(n)], dtype=torch.float32
    )


alphas_cumprod = torch.cumprod(1.0 - squaredcos_betas(T_TRAIN), dim=0).to(device)

policy = DiffusionPolicy().to(device)
ema = copy.deepcopy(policy).requires_grad_(False)
ema_params = list(ema.parameters())
params = list(policy.parameters())
opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-6, fused=amp)
print(f"params {sum(p.numel() for p in params) / 1e6:.1f}M")
if device == "cuda":
    print(f"policy+ema {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def host_obs(bsz):
    imgs = torch.randint(0, 256, (bsz, OBS_STEPS, 2, 3, RES, RES), dtype=torch.uint8)
    proprio = torch.randn(bsz, OBS_STEPS, PROPRIO)
    if device == "cuda":
        imgs, proprio = imgs.pin_memory(), proprio.pin_memory()
    return imgs.to(device, non_blocking=True), proprio.to(device, non_blocking=True)


ema_step = 0


def ema_update():
    global ema_step
    decay = 1 - (1 + ema_step / 1.0) ** -0.75
    decay = max(0.0, min(decay, 0.9999))
    ema_step += 1
    with torch.no_grad():
        torch._foreach_mul_(ema_params, decay)
        torch._foreach_add_(ema_params, params, alpha=1 - decay)


def train_step():
    imgs, proprio = host_obs(B)
    actions = (torch.rand(B, HORIZON, ACT_DIM) * 2 - 1).to(device)
    noise = torch.randn_like(actions)
    t = torch.randint(0, T_TRAIN, (B,), device=device)
    a = alphas_cumprod[t].view(-1, 1, 1)
    noisy = a.sqrt() * actions + (1 - a).sqrt() * noise
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        cond = policy.obs_encoder(imgs, proprio)
        pred = policy.unet(noisy, t, cond)
    loss = F.mse_loss(pred.float(), noise)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    ema_update()
    return loss.item()


policy.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss = train_step()
    print(f"step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@torch.inference_mode()
def sample_actions(net, imgs, proprio):
    cond = net.obs_encoder(imgs, proprio)
    x = torch.randn(imgs.shape[0], HORIZON, ACT_DIM, device=device)
    ts = torch.linspace(T_TRAIN - 1, 0, DDIM_STEPS).round().long().tolist()
    for i, t in enumerate(ts):
        a_t = alphas_cumprod[t]
        a_prev = alphas_cumprod[ts[i + 1]] if i + 1 < len(ts) else torch.ones((), device=device)
        eps = net.unet(x, torch.full((x.shape[0],), t, device=device, dtype=torch.long), cond)
        x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
        x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
    return x[:, :N_ACT_EXEC]


ema.eval()
imgs, proprio = host_obs(N_ENV)
act = sample_actions(ema, imgs, proprio).cpu()
print(f"actions {tuple(act.shape)} mean |a| {act.abs().mean():.3f}")
if device == "cuda":
    print(f"sampling allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
