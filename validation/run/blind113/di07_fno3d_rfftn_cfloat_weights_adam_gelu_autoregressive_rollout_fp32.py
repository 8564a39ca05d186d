"""A 3-D Fourier neural operator for 2-D Navier-Stokes vorticity over space and time, hand-written
after Li et al. 2021's FNO3d: the first 10 time steps and the (x, y, t) grid lifted to width 20
by a Linear, 4 spectral convolutions (torch.fft.rfftn over the last three dimensions, the four
corner blocks of 8 x 8 x 6 modes multiplied by complex64 weights held as nn.Parameter of dtype
cfloat through einsum, irfftn back to the padded size) plus a 1x1x1 Conv3d, GELU, the time axis
padded by 6 and cropped, a projection through 128; batch 10 on a 64 x 64 x 40 grid, relative-L2
loss, fp32, Adam (complex parameters taken as real pairs) with StepLR, 3 steps; then an
autoregressive rollout of 3 windows of 40 steps on 20 trajectories under no_grad, each window's
last 10 frames the next one's input; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11307)
B, S, TT, M1, M2, M3, STEPS, NROLL = (2, 16, 12, 4, 4, 3, 2, 2) if SMALL else (10, 64, 40, 8, 8, 6, 3, 20)
WIDTH, TIN, PAD = 20, 10, 6
device = "cuda" if torch.cuda.is_available() else "cpu"


class SpectralConv3d(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        scale = 1 / (cin * cout)
        self.weights = nn.ParameterList(
            nn.Parameter(scale * torch.rand(cin, cout, M1, M2, M3, dtype=torch.cfloat)) for _ in range(4)
        )

    @staticmethod
    def mul(a, w):
        return torch.einsum("bixyz,ioxyz->boxyz", a, w)

    def forward(self, x):
        b, _, nx, ny, nz = x.shape
        x_ft = torch.fft.rfftn(x, dim=[-3, -2, -1])
        out_ft = torch.zeros(
            b, self.weights[0].size(1), nx, ny, nz // 2 + 1, dtype=torch.cfloat, device=x.device
        )
        out_ft[:, :, :M1, :M2, :M3] = self.mul(x_ft[:, :, :M1, :M2, :M3], self.weights[0])
        out_ft[:, :, -M1:, :M2, :M3] = self.mul(x_ft[:, :, -M1:, :M2, :M3], self.weights[1])
        out_ft[:, :, :M1, -M2:, :M3] = self.mul(x_ft[:, :, :M1, -M2:, :M3], self.weights[2])
        out_ft[:, :, -M1:, -M2:, :M3] = self.mul(x_ft[:, :, -M1:, -M2:, :M3], self.weights[3])
        return torch.fft.irfftn(out_ft, s=(nx, ny, nz), dim=[-3, -2, -1])


class FNO3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc0 = nn.Linear(TIN + 3, WIDTH)
        self.spectral = nn.ModuleList(SpectralConv3d(WIDTH, WIDTH) for _ in range(4))
        self.pointwise = nn.ModuleList(nn.Conv3d(WIDTH, WIDTH, 1) for _ in range(4))
        self.fc1 = nn.Linear(WIDTH, 128)
        self.fc2 = nn.Linear(128, 1)

    def forward(self, a):
        b, nx, ny, nt, _ = a.shape
        gx = torch.linspace(0, 1, nx, device=a.device).view(1, nx, 1, 1, 1).expand(b, nx, ny, nt, 1)
        gy = torch.linspace(0, 1, ny, device=a.device).view(1, 1, ny, 1, 1).expand(b, nx, ny, nt, 1)
        gt = torch.linspace(0, 1, nt, device=a.device).view(1, 1, 1, nt, 1).expand(b, nx, ny, nt, 1)
        x = self.fc0(torch.cat([a, gx, gy, gt], -1)).permute(0, 4, 1, 2, 3)
        x = F.pad(x, [0, PAD])
        for i, (sc, pw) in enumerate(zip(self.spectral, self.pointwise, strict=True)):
            x = sc(x) + pw(x)
            if i < 3:
                x = F.gelu(x)
        x = x[..., :-PAD].permute(0, 2, 3, 4, 1)
        return self.fc2(F.gelu(self.fc1(x))).squeeze(-1)


def rel_l2(pred, target):
    diff = (pred - target).flatten(1).norm(dim=1)
    return (diff / target.flatten(1).norm(dim=1)).mean()


model = FNO3d().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


def trajectories(n):
    w0 = torch.randn(n, S, S, TIN, device=device).cumsum(-1) * 0.1
    target = torch.randn(n, S, S, TT, device=device).cumsum(-1) * 0.05 + w0[..., -1:]
    return w0, target


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    w0, target = trajectories(B)
    a = w0.unsqueeze(3).expand(B, S, S, TT, TIN)
    loss = rel_l2(model(a), target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del w0, target, a, loss
model.eval()
with torch.no_grad():
    w, _ = trajectories(NROLL)
    frames = []
    for _ in range(3):
        out = model(w.unsqueeze(3).expand(NROLL, S, S, TT, TIN))
        frames.append(out)
        w = out[..., -TIN:]
    rollout = torch.cat(frames, -1)
if device == "cuda":
    print(
        f"rollout {tuple(rollout.shape)} mean {rollout.abs().mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
