"""Long-horizon forecasting with N-HiTS written by hand (Challu et al.): 3 stacks of one block each; a
block max-pools its input window (kernel 8, 4, 1: multi-rate signal sampling), runs a 3-layer ReLU MLP
of 512 units with dropout, and emits a full-length backcast and a forecast of only H / r coefficients
(expressiveness ratios r = 24, 12, 1) that F.interpolate (linear) brings back to the horizon;
residual (doubly residual) stacking: the window minus each backcast feeds the next block, forecasts
add. Data: 321 electricity-like hourly series of 8760 steps kept on the device; training windows of
720 past steps and a 96-step horizon gathered with an index tensor (start + arange), per-window
instance normalisation (mean and std of the past, added back after). fp32 weights, Adam with
StepLR, MAE loss, 3 steps of 2048 windows. Then fine-tuning on the last month with fp16 autocast and
GradScaler (init_scale 1024; 2 steps, clip after unscale_), and a rolling evaluation under
inference_mode with bf16 autocast: every series at 28 daily origins, forecasts de-normalised, MAE
and MSE per horizon step.

Phases: 0 data, model and optimizer built; 1 first step; 2 two more steps; 3 fp16 GradScaler
fine-tuning; 4 bf16 rolling evaluation."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(3214)
device = "cuda"
N_SERIES, LENGTH, L, H = 321, 8760, 720, 96


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self, pool, ratio, hidden=512, dropout=0.1):
        super().__init__()
        self.pool = nn.MaxPool1d(pool, stride=pool, ceil_mode=True)
        n_in = math.ceil(L / pool)
        self.n_theta = max(H // ratio, 1)
        layers = [nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout)]
        for _ in range(2):
            layers += [nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(dropout)]
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Linear(hidden, L + self.n_theta)

    def forward(self, x):
        theta = self.head(self.mlp(self.pool(x[:, None]).squeeze(1)))
        backcast, knots = theta[:, :L], theta[:, L:]
        forecast = F.interpolate(knots[:, None], size=H, mode="linear", align_corners=False).squeeze(1)
        return backcast, forecast


class NHiTS(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(8, 24), Block(4, 12), Block(1, 1)])

    def forward(self, past):
        mean = past.mean(1, keepdim=True)
        std = past.std(1, keepdim=True) + 1e-5
        residual = (past - mean) / std
        forecast = 0
        for block in self.blocks:
            backcast, f = block(residual)
            residual = residual - backcast
            forecast = forecast + f
        return forecast * std + mean


t = torch.arange(LENGTH, device=device, dtype=torch.float32)
phase = torch.rand(N_SERIES, 1, device=device) * 2 * math.pi
level = torch.rand(N_SERIES, 1, device=device) * 50 + 10
series = level * (1 + 0.3 * torch.sin(2 * math.pi * t / 24 + phase) + 0.1 * torch.sin(2 * math.pi * t / 168))
series = series + torch.randn(N_SERIES, LENGTH, device=device) * 2
offsets = torch.arange(L + H, device=device)

model = NHiTS().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
report("built")


def windows(n, lo, hi):
    sid = torch.randint(0, N_SERIES, (n,), device=device)
    start = torch.randint(lo, hi - L - H, (n,), device=device)
    w = series[sid[:, None], start[:, None] + offsets]
    return w[:, :L], w[:, L:]


model.train()
for step in range(3):
    past, future = windows(2048, 0, LENGTH - 24 * 30)
    loss = (model(past) - future).abs().mean()
    loss.backward()
    optimizer.step()
    sched.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} mae {loss.item():.4f}")
    del past, future, loss
    if step == 0:
        report("step0")
report("steps1-2")

scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
for step in range(2):
    past, future = windows(1024, LENGTH - 24 * 60, LENGTH)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.l1_loss(model(past), future)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"finetune {step} mae {loss.item():.4f}")
    del past, future, loss
report("finetune")

model.eval()
origins = LENGTH - H - 24 * torch.arange(28, device=device) - 1
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    idx = (origins[:, None] - L + 1 + torch.arange(L + H, device=device)).clamp(max=LENGTH - 1)
    w = series[:, idx].reshape(-1, L + H)
    pred = model(w[:, :L]).float()
    err = pred - w[:, L:]
    mae = err.abs().mean(0)
    mse = err.pow(2).mean(0)
print("rolling", tuple(pred.shape), tuple(mae.shape), f"{mae.mean().item():.3f} {mse.mean().item():.3f}")
del w, pred, err, idx
report("rolling_eval")
