"""FourCastNet at its native 0.25-degree resolution, written after NVlabs/FourCastNet's afnonet.py and
train.py: 26 input channels (20 atmospheric variables plus 6 static/forcing fields: land-sea mask,
orography, cos/sin of latitude and of the time of day) on the 720 x 1440 lat-lon grid, an 8 x 8
Conv2d patch embedding to 90 x 180 tokens of 768 plus a learned position embedding, 12 AFNO blocks
(LayerNorm, the AFNO2D filter: the tokens cast to fp32, torch.fft.rfft2 over (lat, lon) with
norm="ortho", the lowest half of the modes kept (hard_thresholding_fraction 0.5) through a block-
diagonal complex two-layer MLP of 8 blocks written with real einsums over .real / .imag and ReLU,
F.softshrink(0.01) of the stacked parts, torch.view_as_complex, irfft2 back to (90, 180) and the
dtype restored, plus the filter's own skip; a double skip around a GELU MLP of ratio 4), and a linear
head unpatchified back to 20 channels on the grid.

Training as FourCastNet does it: fp16 autocast with torch.cuda.amp-style GradScaler, Adam (lr 5e-4),
CosineAnnealingLR, the latitude-weighted MSE (cos(lat) weights normalised to mean 1) of the 6-hour
tendency target, batch 1. Phases: the first step; 3 more steps; the two-step fine-tuning stage (the
model applied autoregressively twice, the second step's input the first's output with the forcing
channels re-attached, each step wrapped in torch.utils.checkpoint(use_reentrant=False), loss summed
over both steps) for 2 optimizer steps; a 6-step ensemble rollout of 4 members (initial condition
perturbed with Gaussian noise, sigma 0.3) under torch.inference_mode and fp16 autocast, the ensemble
mean's latitude-weighted RMSE per step moved to the host. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18701)
if SMALL:
    B, H, W, P, D, DEPTH, STEPS, ROLL, MEMBERS = 1, 32, 64, 8, 64, 2, 1, 2, 2
else:
    B, H, W, P, D, DEPTH, STEPS, ROLL, MEMBERS = 1, 720, 1440, 8, 768, 12, 3, 6, 4
N_ATM, N_STATIC = 20, 6
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class AFNO2D(nn.Module):
    def __init__(self, hidden_size, num_blocks=8, sparsity_threshold=0.01, hard_thresholding_fraction=0.5):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_blocks = num_blocks
        self.block_size = hidden_size // num_blocks
        self.sparsity_threshold = sparsity_threshold
        self.hard_thresholding_fraction = hard_thresholding_fraction
        bs = self.block_size
        self.scale = 0.02
        self.w1 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs, bs))
        self.b1 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs))
        self.w2 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs, bs))
        self.b2 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs))

    def forward(self, x):
        bias = x
        dtype = x.dtype
        x = x.float()
        b, h, w, c = x.shape
        x = torch.fft.rfft2(x, dim=(1, 2), norm="ortho")
        x = x.reshape(b, h, w // 2 + 1, self.num_blocks, self.block_size)

        o1_real = torch.zeros([b, h, w // 2 + 1, self.num_blocks, self.block_size], device=x.device)
        o1_imag = torch.zeros([b, h, w // 2 + 1, self.num_blocks, self.block_size], device=x.device)
        o2_real = torch.zeros(x.shape, device=x.device)
        o2_imag = torch.zeros(x.shape, device=x.device)

        total_modes = h // 2 + 1
        kept_modes = int(total_modes * self.hard_thresholding_fraction)
        sl = slice(total_modes - kept_modes, total_modes + kept_modes)
        xs = x[:, sl, :kept_modes]

        o1_real[:, sl, :kept_modes] = F.relu(
            torch.einsum("...bi,bio->...bo", xs.real, self.w1[0])
            - torch.einsum("...bi,bio->...bo", xs.imag, self.w1[1])
            + self.b1[0]
        )
        o1_imag[:, sl, :kept_modes] = F.relu(
            torch.einsum("...bi,bio->...bo", xs.imag, self.w1[0])
            + torch.einsum("...bi,bio->...bo", xs.real, self.w1[1])
            + self.b1[1]
        )
        o2_real[:, sl, :kept_modes] = (
            torch.einsum("...bi,bio->...bo", o1_real[:, sl, :kept_modes], self.w2[0])
            - torch.einsum("...bi,bio->...bo", o1_imag[:, sl, :kept_modes], self.w2[1])
            + self.b2[0]
        )
        o2_imag[:, sl, :kept_modes] = (
            torch.einsum("...bi,bio->...bo", o1_imag[:, sl, :kept_modes], self.w2[0])
            + torch.einsum("...bi,bio->...bo", o1_real[:, sl, :kept_modes], self.w2[1])
            + self.b2[1]
        )

        x = torch.stack([o2_real, o2_imag], dim=-1)
        x = F.softshrink(x, lambd=self.sparsity_threshold)
        x = torch.view_as_complex(x)
        x = x.reshape(b, h, w // 2 + 1, c)
        x = torch.fft.irfft2(x, s=(h, w), dim=(1, 2), norm="ortho")
        x = x.type(dtype)
        return x + bias


class Mlp(nn.Module):
    def __init__(self, dim, ratio=4.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, int(dim * ratio))
        self.fc2 = nn.Linear(int(dim * ratio), dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.filter = AFNO2D(dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim)

    def forward(self, x):
        residual = x
        x = self.norm1(x)
        x = self.filter(x)
        x = x + residual  # double skip
        residual = x
        x = self.norm2(x)
        x = self.mlp(x)
        return x + residual


class AFNONet(nn.Module):
    def __init__(self, in_chans, out_chans, img_size, patch, dim, depth):
        super().__init__()
        self.h, self.w = img_size[0] // patch, img_size[1] // patch
        self.patch = patch
        self.out_chans = out_chans
        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.h * self.w, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, out_chans * patch * patch, bias=False)

    def forward(self, x):
        b = x.shape[0]
        x = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        x = x.reshape(b, self.h, self.w, -1)
        for blk in self.blocks:
            x = blk(x)
        x = self.head(x)
        x = x.reshape(b, self.h, self.w, self.patch, self.patch, self.out_chans)
        x = x.permute(0, 5, 1, 3, 2, 4).reshape(b, self.out_chans, self.h * self.patch, self.w * self.patch)
        return x


lat = torch.linspace(90, -90, H)
lat_w = torch.cos(torch.deg2rad(lat))
lat_w = (lat_w / lat_w.mean()).view(1, 1, H, 1).to(device)


def weighted_mse(pred, target):
    return ((pred.float() - target) ** 2 * lat_w).mean()


def weighted_rmse(pred, target):
    return torch.sqrt(((pred.float() - target) ** 2 * lat_w).mean(dim=(-2, -1))).mean(dim=0)


model = AFNONet(N_ATM + N_STATIC, N_ATM, (H, W), P, D, DEPTH).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=5e-4)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
static = torch.randn(1, N_STATIC, H, W, device=device)


def batch():
    x = torch.randn(B, N_ATM, H, W, device=device)
    y = x + 0.1 * torch.randn(B, N_ATM, H, W, device=device)
    return x, y


def train_step():
    x, y = batch()
    model.train()
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        pred = model(torch.cat([x, static.expand(B, -1, -1, -1)], dim=1))
        loss = weighted_mse(pred, y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    return loss.item()


print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def one_step(state):
    return model(torch.cat([state, static.expand(state.shape[0], -1, -1, -1)], dim=1))


for step in range(2):
    x0 = torch.randn(B, N_ATM, H, W, device=device)
    y1 = x0 + 0.1 * torch.randn_like(x0)
    y2 = y1 + 0.1 * torch.randn_like(x0)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        p1 = checkpoint(one_step, x0, use_reentrant=False)
        p2 = checkpoint(one_step, p1.float(), use_reentrant=False)
        loss = weighted_mse(p1, y1) + weighted_mse(p2, y2)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    print(f"finetune step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"two-step finetune peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    truth = torch.randn(ROLL + 1, N_ATM, H, W, device=device)
    state = truth[0:1] + 0.3 * torch.randn(MEMBERS, N_ATM, H, W, device=device)
    rmses = []
    for t in range(1, ROLL + 1):
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            state = one_step(state).float()
        rmses.append(weighted_rmse(state.mean(dim=0, keepdim=True), truth[t : t + 1]))
    rmse = torch.stack(rmses).cpu()
print(f"ensemble rollout rmse (first var) {[round(v, 3) for v in rmse[:, 0].tolist()]}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
