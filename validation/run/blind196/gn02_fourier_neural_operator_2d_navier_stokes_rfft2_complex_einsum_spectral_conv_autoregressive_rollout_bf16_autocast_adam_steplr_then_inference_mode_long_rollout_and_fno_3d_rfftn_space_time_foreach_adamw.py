"""Fourier neural operators (Li et al. 2021) for 2-D incompressible Navier-Stokes vorticity, written by
hand as in the reference code: an autoregressive FNO-2D and then a space-time FNO-3D.

FNO-2D: the input is the last 10 vorticity snapshots on a 64 x 64 periodic grid plus the (x, y) grid
(12 channels, channels-last), lifted by a Linear to width 32; four Fourier layers, each a spectral
convolution (torch.fft.rfft2, a complex einsum "bixy,ioxy->boxy" with cfloat weights on the 12 x 12
lowest modes of both corners, torch.fft.irfft2 into a zero-filled cfloat out_ft) plus a 1x1 nn.Conv2d,
GELU between layers; projection Linear 32 -> 128 -> 1. Training predicts 10 future steps one at a time,
each prediction appended to the input window (backprop through the whole rollout), relative L2 loss
summed over steps, batch 32, under bf16 autocast (the spectral convolutions cast their input to fp32
first: no bf16 FFTs), Adam (lr 1e-3, weight decay 1e-4, foreach) with StepLR.

FNO-3D: a (x, y, t) operator on 64 x 64 x 40 (the 10 input snapshots repeated along t plus 3 grid
channels = 13), width 20, four layers of torch.fft.rfftn / irfftn over the last three dims with four
complex weight corners of 8 x 8 x 8 modes plus a 1x1x1 nn.Conv3d, projection 20 -> 128 -> 1, batch 8,
bf16 autocast, foreach AdamW.

Phases: the first FNO-2D step; 4 more steps; an inference_mode evaluation rolling out 20 steps at batch
128 under autocast with the trajectories moved to the host; three FNO-3D training steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1962)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    S, B, T_IN, T_OUT, WIDTH, MODES, STEPS, EVAL_B, EVAL_T = 16, 2, 10, 3, 8, 4, 1, 4, 4
    S3, T3, B3, W3, M3 = 16, 8, 1, 6, 4
else:
    S, B, T_IN, T_OUT, WIDTH, MODES, STEPS, EVAL_B, EVAL_T = 64, 32, 10, 10, 32, 12, 4, 128, 20
    S3, T3, B3, W3, M3 = 64, 40, 8, 20, 8


class SpectralConv2d(nn.Module):
    def __init__(self, cin, cout, m1, m2):
        super().__init__()
        self.cout, self.m1, self.m2 = cout, m1, m2
        scale = 1 / (cin * cout)
        self.weights1 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))
        self.weights2 = nn.Parameter(scale * torch.rand(cin, cout, m1, m2, dtype=torch.cfloat))

    def forward(self, x):
        b = x.shape[0]
        x_ft = torch.fft.rfft2(x.float())  # no bf16 FFTs
        out_ft = torch.zeros(
            b, self.cout, x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat, device=x.device
        )
        out_ft[:, :, : self.m1, : self.m2] = torch.einsum(
            "bixy,ioxy->boxy", x_ft[:, :, : self.m1, : self.m2], self.weights1
        )
        out_ft[:, :, -self.m1 :, : self.m2] = torch.einsum(
            "bixy,ioxy->boxy", x_ft[:, :, -self.m1 :, : self.m2], self.weights2
        )
        return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))


class FNO2d(nn.Module):
    def __init__(self, modes, width, t_in):
        super().__init__()
        self.fc0 = nn.Linear(t_in + 2, width)
        self.convs = nn.ModuleList(SpectralConv2d(width, width, modes, modes) for _ in range(4))
        self.ws = nn.ModuleList(nn.Conv2d(width, width, 1) for _ in range(4))
        self.fc1 = nn.Linear(width, 128)
        self.fc2 = nn.Linear(128, 1)

    def forward(self, x):
        b, sx, sy = x.shape[0], x.shape[1], x.shape[2]
        gx = torch.linspace(0, 1, sx, device=x.device).reshape(1, sx, 1, 1).repeat(b, 1, sy, 1)
        gy = torch.linspace(0, 1, sy, device=x.device).reshape(1, 1, sy, 1).repeat(b, sx, 1, 1)
        x = self.fc0(torch.cat((x, gx, gy), dim=-1)).permute(0, 3, 1, 2)
        for i, (conv, w) in enumerate(zip(self.convs, self.ws, strict=True)):
            x = conv(x) + w(x)
            if i < 3:
                x = F.gelu(x)
        x = x.permute(0, 2, 3, 1)
        return self.fc2(F.gelu(self.fc1(x)))


def rel_l2(pred, y):
    b = pred.shape[0]
    diff = (pred.reshape(b, -1) - y.reshape(b, -1)).norm(dim=1)
    return (diff / y.reshape(b, -1).norm(dim=1)).sum()


model = FNO2d(MODES, WIDTH, T_IN).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=100, gamma=0.5)
print(f"FNO-2D params {sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())}")

w0 = torch.randn(B * (STEPS + 1), S, S, T_IN + T_OUT, device=device)


def fno2d_step(i):
    batch = w0[i * B : (i + 1) * B]
    xx, yy = batch[..., :T_IN], batch[..., T_IN:]
    loss = 0
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        for t in range(T_OUT):
            y = yy[..., t : t + 1]
            im = model(xx)
            loss = loss + rel_l2(im.float(), y)
            xx = torch.cat((xx[..., 1:], im.float()), dim=-1)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    return loss.item() / (B * T_OUT)


model.train()
print(f"step 0 loss {fno2d_step(0):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for i in range(1, STEPS + 1):
    loss = fno2d_step(i)
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
traj = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    xx = torch.randn(EVAL_B, S, S, T_IN, device=device)
    for _ in range(EVAL_T):
        im = model(xx).float()
        traj.append(im.cpu())
        xx = torch.cat((xx[..., 1:], im), dim=-1)
traj = torch.cat(traj, dim=-1)
print(f"rollout {tuple(traj.shape)} mean abs {traj.abs().mean():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class SpectralConv3d(nn.Module):
    def __init__(self, cin, cout, m1, m2, m3):
        super().__init__()
        self.cout, self.m = cout, (m1, m2, m3)
        scale = 1 / (cin * cout)
        self.weights = nn.ParameterList(
            nn.Parameter(scale * torch.rand(cin, cout, m1, m2, m3, dtype=torch.cfloat)) for _ in range(4)
        )

    def forward(self, x):
        b = x.shape[0]
        m1, m2, m3 = self.m
        x_ft = torch.fft.rfftn(x.float(), dim=[-3, -2, -1])
        out_ft = torch.zeros(
            b, self.cout, x.size(-3), x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat, device=x.device
        )
        corners = [
            (slice(None, m1), slice(None, m2)),
            (slice(-m1, None), slice(None, m2)),
            (slice(None, m1), slice(-m2, None)),
            (slice(-m1, None), slice(-m2, None)),
        ]
        for (sx, sy), w in zip(corners, self.weights, strict=True):
            out_ft[:, :, sx, sy, :m3] = torch.einsum("bixyz,ioxyz->boxyz", x_ft[:, :, sx, sy, :m3], w)
        return torch.fft.irfftn(out_ft, s=(x.size(-3), x.size(-2), x.size(-1)))


class FNO3d(nn.Module):
    def __init__(self, modes, width, t_in):
        super().__init__()
        self.fc0 = nn.Linear(t_in + 3, width)
        self.convs = nn.ModuleList(SpectralConv3d(width, width, modes, modes, modes) for _ in range(4))
        self.ws = nn.ModuleList(nn.Conv3d(width, width, 1) for _ in range(4))
        self.fc1 = nn.Linear(width, 128)
        self.fc2 = nn.Linear(128, 1)

    def forward(self, x):
        b, sx, sy, st = x.shape[:4]
        grids = [
            torch.linspace(0, 1, n, device=x.device).reshape(shape).expand(b, sx, sy, st, 1)
            for n, shape in ((sx, (1, sx, 1, 1, 1)), (sy, (1, 1, sy, 1, 1)), (st, (1, 1, 1, st, 1)))
        ]
        x = self.fc0(torch.cat((x, *grids), dim=-1)).permute(0, 4, 1, 2, 3)
        for i, (conv, w) in enumerate(zip(self.convs, self.ws, strict=True)):
            x = conv(x) + w(x)
            if i < 3:
                x = F.gelu(x)
        x = x.permute(0, 2, 3, 4, 1)
        return self.fc2(F.gelu(self.fc1(x)))


model = opt = sched = w0 = traj = None
fno3 = FNO3d(M3, W3, T_IN).to(device)
opt3 = torch.optim.AdamW(fno3.parameters(), lr=1e-3, weight_decay=1e-4, foreach=True)
fno3.train()
for step in range(3):
    a = torch.randn(B3, S3, S3, 1, T_IN, device=device).repeat(1, 1, 1, T3, 1)
    u = torch.randn(B3, S3, S3, T3, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = fno3(a).squeeze(-1)
    loss = rel_l2(out.float(), u) / B3
    opt3.zero_grad(set_to_none=True)
    loss.backward()
    opt3.step()
    print(f"fno3d step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"fno3d peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
