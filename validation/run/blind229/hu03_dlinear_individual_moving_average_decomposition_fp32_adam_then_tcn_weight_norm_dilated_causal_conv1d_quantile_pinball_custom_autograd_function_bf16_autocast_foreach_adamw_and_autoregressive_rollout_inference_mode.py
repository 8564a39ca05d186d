"""DLinear (Zeng et al. 2023) with individual per-channel linear maps, then a Temporal Convolutional Network
for quantile forecasting.

DLinear: the input (batch 32, lookback 336, 862 channels) split by a moving average of 25 (the ends
repeated, AvgPool1d with stride 1) into trend and seasonal parts, each mapped to the horizon 336 by its own
[C, L, H] weight through torch.einsum, trained 4 steps in fp32 with Adam (MSE), then no_grad evaluation at
batch 128. TCN (Bai et al. 2018): 8 residual blocks of two dilated causal Conv1d (kernel 3, dilations 1 to
128, left padding by F.pad, 128 channels) under torch.nn.utils.parametrizations.weight_norm, ReLU and
dropout, a 1x1 downsample on the first block, over 321 input series of 1,024 steps; the last step's
features give 24 steps x 3 quantiles (0.1, 0.5, 0.9) of every series, the pinball loss by a custom
torch.autograd.Function (saves the residual sign only). 5 steps of foreach AdamW under bf16 autocast at
batch 128 with clip 0.5; then an autoregressive rollout in inference_mode at batch 256: 12 rounds of
forecasting 24 steps and sliding the window by cat and slicing (a 288-step forecast). 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

torch.manual_seed(2293)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class MovingAvg(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.pool = nn.AvgPool1d(k, stride=1)

    def forward(self, x):  # [B, L, C]
        front = x[:, :1].repeat(1, (self.k - 1) // 2, 1)
        end = x[:, -1:].repeat(1, (self.k - 1) // 2, 1)
        x = torch.cat([front, x, end], dim=1)
        return self.pool(x.permute(0, 2, 1)).permute(0, 2, 1)


class DLinear(nn.Module):
    def __init__(self, c, lookback, horizon, k=25):
        super().__init__()
        self.decomp = MovingAvg(k)
        self.w_season = nn.Parameter(torch.randn(c, lookback, horizon) / lookback)
        self.w_trend = nn.Parameter(torch.randn(c, lookback, horizon) / lookback)
        self.b_season = nn.Parameter(torch.zeros(c, horizon))
        self.b_trend = nn.Parameter(torch.zeros(c, horizon))

    def forward(self, x):
        trend = self.decomp(x)
        season = x - trend
        s = torch.einsum("blc,clh->bch", season, self.w_season) + self.b_season
        t = torch.einsum("blc,clh->bch", trend, self.w_trend) + self.b_trend
        return (s + t).permute(0, 2, 1)


C1, L1, H1 = 862, 336, 336
dl = DLinear(C1, L1, H1).to(device)
opt = torch.optim.Adam(dl.parameters(), lr=1e-3)
print("dlinear params", sum(p.numel() for p in dl.parameters()))
for step in range(4):
    x = torch.randn(32, L1 + H1, C1, device=device)
    loss = F.mse_loss(dl(x[:, :L1]), x[:, L1:])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("dlinear step", step, loss.item())
report("dlinear_train")

with torch.no_grad():
    x = torch.randn(128, L1 + H1, C1, device=device)
    pred = dl(x[:, :L1])
    print("dlinear eval mse", F.mse_loss(pred, x[:, L1:]).item())
report("dlinear_eval")
del dl, opt, x, pred, loss


class Pinball(torch.autograd.Function):
    @staticmethod
    def forward(ctx, pred, target, taus):  # pred [B, H, C, Q], target [B, H, C], taus [Q]
        diff = target.unsqueeze(-1) - pred
        below = diff >= 0
        ctx.save_for_backward(below, taus)
        ctx.numel = diff.numel()
        return torch.where(below, taus * diff, (taus - 1) * diff).mean()

    @staticmethod
    def backward(ctx, g):
        below, taus = ctx.saved_tensors
        grad = torch.where(below, -taus, 1 - taus) * (g / ctx.numel)
        return grad, None, None


class TemporalBlock(nn.Module):
    def __init__(self, cin, cout, k, dilation, dropout=0.1):
        super().__init__()
        self.pad = (k - 1) * dilation
        self.conv1 = weight_norm(nn.Conv1d(cin, cout, k, dilation=dilation))
        self.conv2 = weight_norm(nn.Conv1d(cout, cout, k, dilation=dilation))
        self.drop = nn.Dropout(dropout)
        self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.drop(F.relu(self.conv1(F.pad(x, (self.pad, 0)))))
        h = self.drop(F.relu(self.conv2(F.pad(h, (self.pad, 0)))))
        res = x if self.down is None else self.down(x)
        return F.relu(h + res)


class TCN(nn.Module):
    def __init__(self, c, hidden=128, levels=8, k=3, horizon=24, quantiles=3):
        super().__init__()
        self.c, self.horizon, self.q = c, horizon, quantiles
        self.blocks = nn.Sequential(*[TemporalBlock(c if i == 0 else hidden, hidden, k, 2 ** i)
                                      for i in range(levels)])
        self.head = nn.Linear(hidden, horizon * c * quantiles)

    def forward(self, x):  # [B, C, T]
        h = self.blocks(x)[:, :, -1]
        return self.head(h).view(-1, self.horizon, self.c, self.q)


C2, T2, H2 = 321, 1024, 24
tcn = TCN(C2).to(device)
taus = torch.tensor([0.1, 0.5, 0.9], device=device)
opt = torch.optim.AdamW(tcn.parameters(), lr=2e-3, weight_decay=1e-4, foreach=True)
print("tcn params", sum(p.numel() for p in tcn.parameters()))
tcn.train()
for step in range(5):
    series = torch.randn(128, C2, T2 + H2, device=device).cumsum(-1) * 0.05
    with torch.autocast("cuda", dtype=torch.bfloat16):
        q = tcn(series[:, :, :T2])
    loss = Pinball.apply(q.float(), series[:, :, T2:].transpose(1, 2), taus)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(tcn.parameters(), 0.5)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("tcn step", step, loss.item())
report("tcn_train_bf16")

tcn.eval()
with torch.inference_mode():
    window = torch.randn(256, C2, T2, device=device).cumsum(-1) * 0.05
    outs = []
    for r in range(12):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            q = tcn(window)
        median = q[..., 1].float().transpose(1, 2)  # [B, C, 24]
        outs.append(q.float())
        window = torch.cat([window, median], dim=-1)[:, :, -T2:]
    forecast = torch.cat(outs, dim=1)
    print("rollout", tuple(forecast.shape), forecast.abs().mean().item())
report("tcn_rollout")
