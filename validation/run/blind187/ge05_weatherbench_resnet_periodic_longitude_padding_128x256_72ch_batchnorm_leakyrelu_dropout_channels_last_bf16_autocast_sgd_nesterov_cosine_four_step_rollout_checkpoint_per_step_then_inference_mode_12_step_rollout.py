"""A WeatherBench-style residual CNN forecaster (after Rasp & Thuerey 2021, "Data-driven medium-range
weather prediction with a ResNet pretrained on climate simulations"), written by hand: 1.40625-degree
fields on a 128 x 256 lat-lon grid, 72 input channels (Z, T, Q, U, V on 13 pressure levels, 4 surface
fields and 3 constants: orography, land-sea mask, latitude) predicting the 69 prognostic channels 6 h
ahead. Every convolution pads periodically in longitude (F.pad mode="circular") and with zeros at the
poles, then runs unpadded: a 7 x 7 input convolution to 128 channels, 12 residual blocks (two 3 x 3
convolutions each followed by BatchNorm2d, LeakyReLU(0.3) and Dropout(0.1)), and a 5 x 5 output
convolution. The model and inputs are channels_last.

bf16 autocast, SGD with Nesterov momentum 0.9 (lr 0.05, weight decay 1e-5) and CosineAnnealingLR, loss
the latitude-weighted MSE (cos(lat) normalised), batch 8. Phases: the first single-step step; 2 more;
2 optimizer steps of a 4-step autoregressive rollout (the prediction concatenated with the next
constants and fed back, every step under torch.utils.checkpoint(use_reentrant=False), the loss the mean
over steps); a 12-step (3-day) rollout in eval mode under torch.inference_mode and bf16 autocast with
the latitude-weighted RMSE of Z500 per lead time moved to the host. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18705)
if SMALL:
    B, NLAT, NLON, CH, BLOCKS, STEPS, ROLL, EVAL_ROLL = 2, 16, 32, 16, 2, 1, 2, 3
else:
    B, NLAT, NLON, CH, BLOCKS, STEPS, ROLL, EVAL_ROLL = 8, 128, 256, 128, 12, 2, 4, 12
N_OUT, N_CONST = 69, 3
N_IN = N_OUT + N_CONST
Z500 = 7
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class PeriodicConv2d(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.pad = k // 2
        self.conv = nn.Conv2d(cin, cout, k, padding=0)

    def forward(self, x):
        x = F.pad(x, (self.pad, self.pad, 0, 0), mode="circular")
        x = F.pad(x, (0, 0, self.pad, self.pad))
        return self.conv(x)


class ConvBlock(nn.Module):
    def __init__(self, cin, cout, k=3):
        super().__init__()
        self.conv = PeriodicConv2d(cin, cout, k)
        self.bn = nn.BatchNorm2d(cout)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(F.leaky_relu(self.bn(self.conv(x)), 0.3))


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.b1 = ConvBlock(ch, ch)
        self.b2 = ConvBlock(ch, ch)

    def forward(self, x):
        return x + self.b2(self.b1(x))


class WeatherResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = ConvBlock(N_IN, CH, 7)
        self.blocks = nn.Sequential(*[ResBlock(CH) for _ in range(BLOCKS)])
        self.out = PeriodicConv2d(CH, N_OUT, 5)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


lat = torch.linspace(-88.6, 88.6, NLAT)
lat_w = torch.cos(torch.deg2rad(lat))
lat_w = (lat_w / lat_w.mean()).view(1, 1, NLAT, 1).to(device)
constants = torch.randn(1, N_CONST, NLAT, NLON, device=device)


def weighted_mse(pred, target):
    return ((pred.float() - target) ** 2 * lat_w).mean()


model = WeatherResNet().to(device).to(memory_format=torch.channels_last)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-5)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=50)


def step_fn(state):
    x = torch.cat([state, constants.expand(state.shape[0], -1, -1, -1)], dim=1)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        return state + model(x).float()


def fields(*shape):
    return torch.randn(*shape, device=device).contiguous(memory_format=torch.channels_last)


model.train()
for step in range(STEPS + 1):
    x, y = fields(B, N_OUT, NLAT, NLON), fields(B, N_OUT, NLAT, NLON)
    loss = weighted_mse(step_fn(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    traj = [fields(B, N_OUT, NLAT, NLON) for _ in range(ROLL + 1)]
    state = traj[0]
    losses = []
    for t in range(1, ROLL + 1):
        state = checkpoint(step_fn, state, use_reentrant=False)
        losses.append(weighted_mse(state, traj[t]))
    loss = torch.stack(losses).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    print(f"rollout step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"rollout training peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    truth = [fields(B, N_OUT, NLAT, NLON) for _ in range(EVAL_ROLL + 1)]
    state = truth[0]
    rmse = []
    for t in range(1, EVAL_ROLL + 1):
        state = step_fn(state)
        err = (state[:, Z500] - truth[t][:, Z500]) ** 2 * lat_w[:, 0]
        rmse.append(err.mean(dim=(-2, -1)).sqrt().mean())
    rmse = torch.stack(rmse).cpu()
print(f"Z500 RMSE by lead {[round(v, 3) for v in rmse.tolist()]}")
if device == "cuda":
    print(
        f"rollout inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
