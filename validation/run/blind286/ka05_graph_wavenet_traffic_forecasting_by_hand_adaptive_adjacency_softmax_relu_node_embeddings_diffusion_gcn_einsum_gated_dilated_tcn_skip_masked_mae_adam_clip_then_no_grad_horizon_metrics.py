"""Graph WaveNet (Wu et al. 2019) for traffic speed forecasting, written by hand as its reference code does,
fp32. PEMS-BAY-like data (synthetic, seeded): 325 sensors, 5-minute speeds with daily periodicity,
spatially smoothed over a random sensor graph, 3% missing readings stored as 0, plus a time-of-day channel;
12 steps in, 12 out, standard-scaled. Supports: the forward and backward random-walk transition matrices
of a thresholded Gaussian-kernel distance graph, plus the self-adaptive adjacency
`softmax(relu(E1 @ E2), dim=1)` of two learned 10-d node embeddings, recomputed every forward.
The network: a 1x1 start conv on the input left-padded to the receptive field (13), 4 blocks x 2 layers
of gated dilated temporal convs ((1, 2) kernels, dilations 1, 2; tanh filter * sigmoid gate), a 1x1 skip
conv into a running skip sum (sliced to the shrinking length), a diffusion graph conv of order 2 per
support (`einsum('ncvl,vw->ncwl')` then `.contiguous()`, the 7 pieces concatenated on channels, a 1x1
conv, dropout 0.3), the residual added, BatchNorm2d; then relu, two 1x1 end convs to the 12 horizons.
Masked MAE on the inverse-transformed predictions (mask of non-zero labels normalised by its mean,
NaNs zeroed with `torch.where`), Adam lr 1e-3, weight decay 1e-4, gradients clipped at 5.
Phase 1: 20 steps at batch 64. Phase 2: no_grad evaluation of 3,072 test windows in batches of 512,
masked MAE / RMSE / MAPE at horizons 3, 6 and 12.
2 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2865)
dev = "cuda"
N, T_IN, T_OUT, STEPS = 325, 12, 12, 288 * 40


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# --- synthetic sensors, graph and series --------------------------------------------------------------
coords = torch.rand(N, 2) * 30
dist = torch.cdist(coords, coords)
std = dist.std()
adj = torch.exp(-((dist / std) ** 2))
adj[adj < 0.1] = 0


def transition(a):
    d = a.sum(1)
    d_inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    return (torch.diag(d_inv) @ a).T.contiguous()


supports = [transition(adj).to(dev), transition(adj.T).to(dev)]
t = torch.arange(STEPS, dtype=torch.float32)
tod = (t % 288) / 288
base = 60 + 5 * torch.randn(N, 1)
rush = torch.exp(-((tod - 0.33) ** 2) / 0.002) + torch.exp(-((tod - 0.72) ** 2) / 0.003)
speed = base - 25 * torch.rand(N, 1) * rush + 2 * torch.randn(N, STEPS)
smooth = adj / adj.sum(1, keepdim=True)
speed = (smooth @ speed).clamp_min(1)
speed[torch.rand(N, STEPS) < 0.03] = 0.0
train_end = int(STEPS * 0.7)
mean, sd = (
    speed[:, :train_end][speed[:, :train_end] > 0].mean(),
    speed[:, :train_end][speed[:, :train_end] > 0].std(),
)
data = torch.stack([(speed - mean) / sd, tod.expand(N, -1)], 0).to(dev)  # (2, N, STEPS)
speed = speed.to(dev)


def windows(starts):
    idx = torch.as_tensor(starts, device=dev).view(-1, 1) + torch.arange(T_IN + T_OUT, device=dev)
    x = data[:, :, idx[:, :T_IN]].permute(2, 0, 1, 3)  # (B, 2, N, 12)
    y = speed[:, idx[:, T_IN:]].permute(1, 0, 2)  # (B, N, 12)
    return x.contiguous(), y.contiguous()


# --- model -----------------------------------------------------------------------------------------------
def nconv(x, a):
    return torch.einsum("ncvl,vw->ncwl", x, a).contiguous()


class GCN(nn.Module):
    def __init__(self, c_in, c_out, support_len=3, order=2, dropout=0.3):
        super().__init__()
        self.mlp = nn.Conv2d((order * support_len + 1) * c_in, c_out, 1)
        self.order, self.dropout = order, dropout

    def forward(self, x, supports):
        out = [x]
        for a in supports:
            x1 = nconv(x, a)
            out.append(x1)
            for _ in range(2, self.order + 1):
                x1 = nconv(x1, a)
                out.append(x1)
        h = self.mlp(torch.cat(out, dim=1))
        return F.dropout(h, self.dropout, training=self.training)


class GWNet(nn.Module):
    def __init__(self, supports, in_dim=2, out_dim=12, rc=32, dc=32, sc=256, ec=512, blocks=4, layers=2):
        super().__init__()
        self.supports = supports
        self.nodevec1 = nn.Parameter(torch.randn(N, 10))
        self.nodevec2 = nn.Parameter(torch.randn(10, N))
        self.start_conv = nn.Conv2d(in_dim, rc, 1)
        self.filter_convs, self.gate_convs = nn.ModuleList(), nn.ModuleList()
        self.skip_convs, self.gconv, self.bn = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        self.dilations = []
        rf = 1
        for _b in range(blocks):
            add, d = 1, 1
            for _l in range(layers):
                self.filter_convs.append(nn.Conv2d(rc, dc, (1, 2), dilation=d))
                self.gate_convs.append(nn.Conv2d(rc, dc, (1, 2), dilation=d))
                self.skip_convs.append(nn.Conv2d(dc, sc, 1))
                self.gconv.append(GCN(dc, rc))
                self.bn.append(nn.BatchNorm2d(rc))
                self.dilations.append(d)
                rf += add
                add, d = add * 2, d * 2
        self.receptive_field = rf
        self.end_conv_1 = nn.Conv2d(sc, ec, 1)
        self.end_conv_2 = nn.Conv2d(ec, out_dim, 1)

    def forward(self, x):
        if x.size(3) < self.receptive_field:
            x = F.pad(x, (self.receptive_field - x.size(3), 0, 0, 0))
        x = self.start_conv(x)
        skip = 0
        adp = F.softmax(F.relu(torch.mm(self.nodevec1, self.nodevec2)), dim=1)
        supports = [*self.supports, adp]
        for i in range(len(self.filter_convs)):
            residual = x
            x = torch.tanh(self.filter_convs[i](residual)) * torch.sigmoid(self.gate_convs[i](residual))
            s = self.skip_convs[i](x)
            skip = s + (skip[:, :, :, -s.size(3) :] if torch.is_tensor(skip) else 0)
            x = self.gconv[i](x, supports)
            x = x + residual[:, :, :, -x.size(3) :]
            x = self.bn[i](x)
        x = F.relu(skip)
        x = F.relu(self.end_conv_1(x))
        return self.end_conv_2(x)  # (B, 12, N, 1)


def masked_mae(pred, label):
    mask = (label != 0).float()
    mask = mask / mask.mean()
    mask = torch.where(torch.isnan(mask), torch.zeros_like(mask), mask)
    loss = torch.abs(pred - label) * mask
    return torch.where(torch.isnan(loss), torch.zeros_like(loss), loss).mean()


def masked_metrics(pred, label):
    mask = (label != 0).float()
    mask = mask / mask.mean()
    mae = (torch.abs(pred - label) * mask).mean()
    rmse = torch.sqrt(((pred - label) ** 2 * mask).mean())
    mape = (torch.abs(pred - label) / label.clamp_min(1e-3) * mask).mean()
    return mae, rmse, mape


model = GWNet(supports).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
print("receptive field", model.receptive_field, "parameters", sum(p.numel() for p in model.parameters()))
g = torch.Generator().manual_seed(7)
for _step in range(20):
    starts = torch.randint(0, train_end - T_IN - T_OUT, (64,), generator=g)
    x, y = windows(starts)
    out = model(x).squeeze(-1).transpose(1, 2)  # (B, N, 12)
    loss = masked_mae(out * sd + mean, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("train masked mae", round(loss.item(), 4))
report("train_graph_wavenet_batch_64")

del loss, out, x, y
model.eval()
preds, labels = [], []
with torch.no_grad():
    test_starts = torch.arange(train_end, train_end + 3072)
    for i in range(0, 3072, 512):
        x, y = windows(test_starts[i : i + 512])
        preds.append(model(x).squeeze(-1).transpose(1, 2) * sd + mean)
        labels.append(y)
    pred, label = torch.cat(preds), torch.cat(labels)
    for h in (3, 6, 12):
        mae, rmse, mape = masked_metrics(pred[..., h - 1], label[..., h - 1])
        print(f"horizon {h}: mae {mae.item():.3f} rmse {rmse.item():.3f} mape {mape.item():.4f}")
report("no_grad_test_3072_windows_horizon_metrics")
