"""FourCastNet-style weather forecasting with the Adaptive Fourier Neural Operator (written after
NVlabs/FourCastNet's afnonet.py): 20 atmospheric channels on a 360 x 720 grid cut into 8 x 8
patches (45 x 90 tokens of 384), 8 AFNO blocks whose token mixer is the AFNO2D filter: the tokens
cast to fp32, `rfft2` with norm="ortho", the kept modes (hard thresholding fraction 1.0) through a
block-diagonal complex 2-layer MLP of 8 blocks written as real einsums over `.real` / `.imag`,
written into zero tensors by slice assignment, `softshrink` of the stacked real and imaginary
parts, `view_as_complex`, `irfft2` back and the dtype restored, plus the residual; a 2-layer
MLP per block; the linear head unpatchified by reshape/permute. bf16 autocast, AdamW, one-step
MSE on batch 4; 3 steps; then a 4-step autoregressive rollout under no_grad with the latitude-
weighted RMSE per step; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14001)
B, C, H, W, P, D, DEPTH = (1, 4, 32, 64, 8, 64, 2) if SMALL else (4, 20, 360, 720, 8, 384, 8)
STEPS, ROLL = (2, 2) if SMALL else (3, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"


class AFNO2D(nn.Module):
    def __init__(self, hidden_size, num_blocks=8, sparsity_threshold=0.01, hard_thresholding_fraction=1.0,
                 hidden_size_factor=1):
        super().__init__()
        self.hidden_size = hidden_size
        self.sparsity_threshold = sparsity_threshold
        self.num_blocks = num_blocks
        self.block_size = hidden_size // num_blocks
        self.hard_thresholding_fraction = hard_thresholding_fraction
        self.hidden_size_factor = hidden_size_factor
        self.scale = 0.02
        bs, f = self.block_size, hidden_size_factor
        self.w1 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs, bs * f))
        self.b1 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs * f))
        self.w2 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs * f, bs))
        self.b2 = nn.Parameter(self.scale * torch.randn(2, num_blocks, bs))

    def forward(self, x):
        bias = x
        dtype = x.dtype
        x = x.float()
        Bn, Hh, Ww, Cc = x.shape
        x = torch.fft.rfft2(x, dim=(1, 2), norm="ortho")
        x = x.reshape(Bn, Hh, Ww // 2 + 1, self.num_blocks, self.block_size)
        o1_real = torch.zeros([Bn, Hh, Ww // 2 + 1, self.num_blocks, self.block_size * self.hidden_size_factor],
                              device=x.device)
        o1_imag = torch.zeros_like(o1_real)
        o2_real = torch.zeros(x.shape, device=x.device)
        o2_imag = torch.zeros(x.shape, device=x.device)
        total_modes = Hh // 2 + 1
        kept_modes = int(total_modes * self.hard_thresholding_fraction)
        lo, hi = total_modes - kept_modes, total_modes + kept_modes
        xs = x[:, lo:hi, :kept_modes]
        o1_real[:, lo:hi, :kept_modes] = F.relu(
            torch.einsum("...bi,bio->...bo", xs.real, self.w1[0])
            - torch.einsum("...bi,bio->...bo", xs.imag, self.w1[1])
            + self.b1[0]
        )
        o1_imag[:, lo:hi, :kept_modes] = F.relu(
            torch.einsum("...bi,bio->...bo", xs.imag, self.w1[0])
            + torch.einsum("...bi,bio->...bo", xs.real, self.w1[1])
            + self.b1[1]
        )
        o2_real[:, lo:hi, :kept_modes] = (
            torch.einsum("...bi,bio->...bo", o1_real[:, lo:hi, :kept_modes], self.w2[0])
            - torch.einsum("...bi,bio->...bo", o1_imag[:, lo:hi, :kept_modes], self.w2[1])
            + self.b2[0]
        )
        o2_imag[:, lo:hi, :kept_modes] = (
            torch.einsum("...bi,bio->...bo", o1_imag[:, lo:hi, :kept_modes], self.w2[0])
            + torch.einsum("...bi,bio->...bo", o1_real[:, lo:hi, :kept_modes], self.w2[1])
            + self.b2[1]
        )
        x = torch.stack([o2_real, o2_imag], dim=-1)
        x = F.softshrink(x, lambd=self.sparsity_threshold)
        x = torch.view_as_complex(x)
        x = x.reshape(Bn, Hh, Ww // 2 + 1, Cc)
        x = torch.fft.irfft2(x, s=(Hh, Ww), dim=(1, 2), norm="ortho")
        x = x.type(dtype)
        return x + bias


class Block(nn.Module):
    def __init__(self, dim, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.filter = AFNO2D(dim)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        residual = x
        x = self.norm1(x)
        x = self.filter(x)
        x = x + residual
        residual = x
        x = self.norm2(x)
        x = self.mlp(x)
        return x + residual


class AFNONet(nn.Module):
    def __init__(self, img_size, patch, in_chans, out_chans, dim, depth):
        super().__init__()
        self.h, self.w = img_size[0] // patch, img_size[1] // patch
        self.patch, self.out_chans = patch, out_chans
        self.patch_embed = nn.Conv2d(in_chans, dim, kernel_size=patch, stride=patch)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.h * self.w, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Linear(dim, out_chans * patch * patch, bias=False)

    def forward(self, x):
        Bn = x.shape[0]
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = x + self.pos_embed
        x = x.reshape(Bn, self.h, self.w, -1)
        for blk in self.blocks:
            x = blk(x)
        x = self.head(x)
        x = x.reshape(Bn, self.h, self.w, self.patch, self.patch, self.out_chans)
        x = x.permute(0, 5, 1, 3, 2, 4).reshape(Bn, self.out_chans, self.h * self.patch, self.w * self.patch)
        return x


model = AFNONet((H, W), P, C, C, D, DEPTH).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.0)
lat = torch.linspace(90, -90, H, device=device)
wlat = torch.cos(torch.deg2rad(lat))
wlat = (wlat / wlat.mean()).view(1, 1, H, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    inp = torch.randn(B, C, H, W, device=device)
    tar = inp + 0.1 * torch.randn(B, C, H, W, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        gen = model(inp)
        loss = F.mse_loss(gen.float(), tar)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del gen, loss, inp, tar
model.eval()
with torch.no_grad():
    state = torch.randn(1, C, H, W, device=device)
    truth = [state + 0.05 * k * torch.randn_like(state) for k in range(1, ROLL + 1)]
    rmse = []
    for k in range(ROLL):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            state = model(state).float()
        err = torch.sqrt(torch.mean(wlat * (state - truth[k]) ** 2, dim=(-1, -2)))
        rmse.append(err.mean())
    rmse = torch.stack(rmse)
if device == "cuda":
    print(
        f"rollout rmse {[round(v, 3) for v in rmse.tolist()]} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
print(f"done {math.isfinite(rmse.sum().item())}")
