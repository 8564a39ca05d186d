"""ConvLSTM video prediction (an encoder-forecaster of 3 stacked ConvLSTM cells, 64/128/128
channels, 3x3 gates, on 64x64 frames downsampled to 32x32 by a strided conv), trained in bf16
autocast with Adam on 10 observed frames to predict the next 10, batch 16, scheduled sampling
(a Bernoulli draw per step decides between the true frame and the model's own prediction), L1 plus
MSE loss, gradient clipping; 4 steps, then an 8-frame rollout of 20 future frames under
torch.inference_mode; 2 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8806)
if SMALL:
    B, T_IN, T_OUT, HW, CH, STEPS, ROLL = 2, 3, 3, 16, (8, 8, 8), 2, 4
else:
    B, T_IN, T_OUT, HW, CH, STEPS, ROLL = 16, 10, 10, 64, (64, 128, 128), 4, 20
device = "cuda" if torch.cuda.is_available() else "cpu"


class ConvLSTMCell(nn.Module):
    def __init__(self, cin, ch):
        super().__init__()
        self.ch = ch
        self.gates = nn.Conv2d(cin + ch, 4 * ch, 3, padding=1)

    def forward(self, x, state):
        h, c = state
        i, f, g, o = self.gates(torch.cat([x, h], 1)).chunk(4, 1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h, c


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(1, 32, 4, stride=2, padding=1)
        cins = (32, *CH[:-1])
        self.cells = nn.ModuleList(ConvLSTMCell(a, b) for a, b in zip(cins, CH, strict=True))
        self.up = nn.ConvTranspose2d(sum(CH), 1, 4, stride=2, padding=1)

    def init(self, b):
        s = HW // 2
        return [
            (torch.zeros(b, ch, s, s, device=device), torch.zeros(b, ch, s, s, device=device)) for ch in CH
        ]

    def step(self, frame, states):
        x = F.leaky_relu(self.down(frame), 0.2)
        new = []
        for cell, st in zip(self.cells, states, strict=True):
            h, c = cell(x, st)
            new.append((h, c))
            x = h
        return torch.sigmoid(self.up(torch.cat([h for h, _ in new], 1))), new


model = Forecaster().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def moving_squares(b, t):
    video = torch.zeros(b, t, 1, HW, HW, device=device)
    pos = torch.randint(0, HW - 12, (b, 2))
    vel = torch.randint(-3, 4, (b, 2))
    for k in range(t):
        for n in range(b):
            y, x = (pos[n] + k * vel[n]).clamp(0, HW - 12).tolist()
            video[n, k, 0, y : y + 12, x : x + 12] = 1.0
    return video + 0.05 * torch.randn_like(video)


for it in range(STEPS):
    video = moving_squares(B, T_IN + T_OUT)
    teacher = max(0.0, 1.0 - it / STEPS)
    with torch.autocast(device, dtype=torch.bfloat16):
        states = model.init(B)
        frame, preds = video[:, 0], []
        for k in range(T_IN + T_OUT - 1):
            pred, states = model.step(frame, states)
            if k >= T_IN - 1:
                preds.append(pred)
            use_true = k < T_IN - 1 or bool(torch.rand(()) < teacher)
            frame = video[:, k + 1] if use_true else pred.float()
        preds = torch.stack(preds, 1).float()
    target = video[:, T_IN:]
    loss = F.l1_loss(preds, target) + F.mse_loss(preds, target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
if device == "cuda":
    print(
        f"train loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del video, preds, target, loss, states, frame, pred
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    video = moving_squares(8, T_IN)
    states = model.init(8)
    for k in range(T_IN):
        pred, states = model.step(video[:, k], states)
    future = [pred]
    for _ in range(ROLL - 1):
        pred, states = model.step(pred, states)
        future.append(pred)
    future = torch.stack(future, 1)
if device == "cuda":
    print(
        f"rollout {tuple(future.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
