"""A ConvLSTM precipitation nowcaster in the encoder-forecaster layout of Shi et al. (2015, 2017: the
HKO-7 benchmark's ConvLSTM baseline), written by hand: radar reflectivity frames of 1 x 256 x 256
(normalised to [0, 1]), 5 observed frames in and 10 predicted frames out. Encoder: a 4 x 4 stride-4
Conv2d (1 -> 32) + LeakyReLU to 64 x 64, a ConvLSTM of 64 hidden channels (3 x 3 kernel over [x, h],
the i/f/o/g gates chunked from one convolution), a stride-2 Conv2d to 32 x 32 and a ConvLSTM of 96,
another stride-2 Conv2d to 16 x 16 and a ConvLSTM of 96. Forecaster: the mirror, started from the
encoder's final states with no input at the top: ConvLSTM 96 at 16 x 16, ConvTranspose2d (4, stride
2) to 32 x 32, ConvLSTM 96, ConvTranspose2d to 64 x 64, ConvLSTM 64, then ConvTranspose2d (4 x 4,
stride 4) to 16 channels at 256 x 256 and a 1 x 1 Conv2d to the frame, for each of the 10 steps.

Training in fp32 with Adam (lr 1e-4, betas (0.5, 0.999)), gradient clipping at 50 and StepLR, batch
16, the HKO-7 balanced loss: MSE + MAE weighted per pixel by the rain-intensity thresholds (weights 1,
2, 5, 10, 30). Phases: the first step; 3 more steps; evaluation under no_grad at batch 16 with the
critical success index at 3 thresholds; then the optimizer and its state deleted,
torch.cuda.empty_cache(), and a .half() copy of the model forecasting 20 frames at batch 24 under
torch.inference_mode, the forecasts moved to the host. 4 phases."""

import copy
import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18704)
if SMALL:
    B, HW, IN_T, OUT_T, STEPS, LONG_T, LONG_B = 2, 64, 3, 4, 1, 5, 2
else:
    B, HW, IN_T, OUT_T, STEPS, LONG_T, LONG_B = 16, 256, 5, 10, 3, 20, 24
device = "cuda" if torch.cuda.is_available() else "cpu"


class ConvLSTMCell(nn.Module):
    def __init__(self, cin, hidden, k=3):
        super().__init__()
        self.hidden = hidden
        self.conv = nn.Conv2d(cin + hidden, 4 * hidden, k, padding=k // 2)

    def forward(self, x, state):
        h, c = state
        if x is None:
            x = torch.zeros(
                h.shape[0], self.conv.in_channels - self.hidden, *h.shape[2:], device=h.device, dtype=h.dtype
            )
        gates = self.conv(torch.cat([x, h], dim=1))
        i, f, o, g = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c

    def init_state(self, b, hw, like):
        z = torch.zeros(b, self.hidden, hw, hw, device=like.device, dtype=like.dtype)
        return z, z.clone()


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 32, 4, stride=4)
        self.rnn1 = ConvLSTMCell(32, 64)
        self.down1 = nn.Conv2d(64, 96, 3, stride=2, padding=1)
        self.rnn2 = ConvLSTMCell(96, 96)
        self.down2 = nn.Conv2d(96, 96, 3, stride=2, padding=1)
        self.rnn3 = ConvLSTMCell(96, 96)

    def forward(self, frames):
        b, t, _, hw, _ = frames.shape
        s1 = self.rnn1.init_state(b, hw // 4, frames)
        s2 = self.rnn2.init_state(b, hw // 8, frames)
        s3 = self.rnn3.init_state(b, hw // 16, frames)
        for step in range(t):
            x = F.leaky_relu(self.stem(frames[:, step]), 0.2)
            s1 = self.rnn1(x, s1)
            x = F.leaky_relu(self.down1(s1[0]), 0.2)
            s2 = self.rnn2(x, s2)
            x = F.leaky_relu(self.down2(s2[0]), 0.2)
            s3 = self.rnn3(x, s3)
        return s1, s2, s3


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn3 = ConvLSTMCell(96, 96)
        self.up3 = nn.ConvTranspose2d(96, 96, 4, stride=2, padding=1)
        self.rnn2 = ConvLSTMCell(96, 96)
        self.up2 = nn.ConvTranspose2d(96, 96, 4, stride=2, padding=1)
        self.rnn1 = ConvLSTMCell(96, 64)
        self.up1 = nn.ConvTranspose2d(64, 16, 4, stride=4)
        self.head = nn.Conv2d(16, 1, 1)

    def forward(self, states, steps):
        s1, s2, s3 = states
        outs = []
        for _ in range(steps):
            s3 = self.rnn3(None, s3)
            x = F.leaky_relu(self.up3(s3[0]), 0.2)
            s2 = self.rnn2(x, s2)
            x = F.leaky_relu(self.up2(s2[0]), 0.2)
            s1 = self.rnn1(x, s1)
            x = F.leaky_relu(self.up1(s1[0]), 0.2)
            outs.append(self.head(x))
        return torch.stack(outs, dim=1)


class Nowcaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.forecaster = Forecaster()

    def forward(self, frames, steps):
        return self.forecaster(self.encoder(frames), steps)


THRESH = torch.tensor([0.2, 0.35, 0.45, 0.6])
WEIGHTS = [1.0, 2.0, 5.0, 10.0, 30.0]


def balanced_loss(pred, target):
    w = torch.full_like(target, WEIGHTS[0])
    for th, (lo, hi) in zip(THRESH.tolist(), itertools.pairwise(WEIGHTS), strict=True):
        w = w + (hi - lo) * (target >= th).float()
    diff = pred - target
    return (w * diff * diff).mean() + (w * diff.abs()).mean()


def csi(pred, target, th):
    p, t = pred >= th, target >= th
    hits = (p & t).sum()
    misses = (~p & t).sum()
    false_alarms = (p & ~t).sum()
    return hits / (hits + misses + false_alarms).clamp_min(1)


def radar_batch(b, t_in, t_out):
    seq = torch.rand(b, t_in + t_out, 1, HW, HW, device=device)
    return seq[:, :t_in], seq[:, t_in:]


model = Nowcaster().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.5, 0.999))
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=20000, gamma=0.7)


def train_step():
    inp, tgt = radar_batch(B, IN_T, OUT_T)
    pred = model(inp, OUT_T)
    loss = balanced_loss(pred, tgt)
    opt.zero_grad(set_to_none=True)  # noqa: F821 (deleted before the last phase, which does not call this)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 50.0)
    opt.step()  # noqa: F821
    sched.step()  # noqa: F821
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    print(f"step {step} loss {train_step():.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    inp, tgt = radar_batch(B, IN_T, OUT_T)
    pred = model(inp, OUT_T).clamp(0, 1)
    scores = [csi(pred, tgt, th).item() for th in THRESH[:3].tolist()]
print(f"eval loss {balanced_loss(pred, tgt).item():.4f} CSI {[round(s, 3) for s in scores]}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt, sched, pred, inp, tgt
torch.cuda.empty_cache() if device == "cuda" else None
fast = copy.deepcopy(model).half()
with torch.inference_mode():
    inp, _ = radar_batch(LONG_B, IN_T, 0)
    forecast = fast(inp.half(), LONG_T).clamp_(0, 1).cpu()
print(f"half forecast {tuple(forecast.shape)} mean {forecast.float().mean().item():.4f}")
if device == "cuda":
    print(f"half inference peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
