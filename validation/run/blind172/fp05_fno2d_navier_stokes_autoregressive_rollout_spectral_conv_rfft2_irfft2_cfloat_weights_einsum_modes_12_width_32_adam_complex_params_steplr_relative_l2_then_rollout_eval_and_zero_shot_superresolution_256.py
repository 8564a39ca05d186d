"""A Fourier Neural Operator for 2-D Navier-Stokes as the neuraloperator repository's original
`fourier_2d_time.py` writes it (Li et al. 2021): the FNO2d of width 32 with 12 x 12 retained modes,
four SpectralConv2d layers whose weights are `scale * torch.rand(in, out, m1, m2, dtype=torch.cfloat)`
Parameters (two corner blocks each), each layer torch.fft.rfft2 of the input, `einsum('bixy,ioxy->boxy')`
of the low modes into a zeroed complex `out_ft`, torch.fft.irfft2 with `s=`, plus a 1x1 Conv1d-style
pointwise `nn.Conv2d` and GELU; the lift from the 10 previous vorticity fields and the grid (12
channels) by `nn.Linear`, projection 32 -> 128 -> 1. Autoregressive training as the script does: the
input window of 10 steps rolled forward for T = 10 steps, each prediction concatenated and the
window shifted, the relative L2 loss summed over steps and back-propagated through the whole
rollout; fp32 (complex64 weights), Adam (lr 1e-3, weight decay 1e-4; complex parameters) with
StepLR; batch 16 on a 128 x 128 grid of seeded random fields; 4 steps, the first its own phase; then
a no_grad rollout evaluation of 32 samples; then a zero-shot super-resolution rollout at 256 x 256
(batch 4). Phases: step 0, steps 1-3, eval, super-resolution eval; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17205)
if SMALL:
    MODES, WIDTH, S, S_HI, B, T_IN, T, STEPS, EVAL_N, HI_B = 4, 8, 16, 32, 2, 10, 3, 2, 4, 2
else:
    MODES, WIDTH, S, S_HI, B, T_IN, T, STEPS, EVAL_N, HI_B = 12, 32, 128, 256, 16, 10, 10, 4, 32, 4
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator().manual_seed(17205)


class SpectralConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, modes1, modes2):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.modes1, self.modes2 = modes1, modes2
        self.scale = 1 / (in_channels * out_channels)
        self.weights1 = nn.Parameter(
            self.scale * torch.rand(in_channels, out_channels, self.modes1, self.modes2, dtype=torch.cfloat)
        )
        self.weights2 = nn.Parameter(
            self.scale * torch.rand(in_channels, out_channels, self.modes1, self.modes2, dtype=torch.cfloat)
        )

    def compl_mul2d(self, input, weights):
        return torch.einsum("bixy,ioxy->boxy", input, weights)

    def forward(self, x):
        batchsize = x.shape[0]
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(
            batchsize, self.out_channels, x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat, device=x.device
        )
        out_ft[:, :, : self.modes1, : self.modes2] = self.compl_mul2d(
            x_ft[:, :, : self.modes1, : self.modes2], self.weights1
        )
        out_ft[:, :, -self.modes1 :, : self.modes2] = self.compl_mul2d(
            x_ft[:, :, -self.modes1 :, : self.modes2], self.weights2
        )
        return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))


class FNO2d(nn.Module):
    def __init__(self, modes1, modes2, width):
        super().__init__()
        self.width = width
        self.p = nn.Linear(T_IN + 2, width)
        self.convs = nn.ModuleList(SpectralConv2d(width, width, modes1, modes2) for _ in range(4))
        self.ws = nn.ModuleList(nn.Conv2d(width, width, 1) for _ in range(4))
        self.q1 = nn.Linear(width, width * 4)
        self.q2 = nn.Linear(width * 4, 1)

    def get_grid(self, shape, device):
        b, sx, sy = shape[0], shape[1], shape[2]
        gridx = torch.linspace(0, 1, sx, dtype=torch.float).reshape(1, sx, 1, 1).repeat([b, 1, sy, 1])
        gridy = torch.linspace(0, 1, sy, dtype=torch.float).reshape(1, 1, sy, 1).repeat([b, sx, 1, 1])
        return torch.cat((gridx, gridy), dim=-1).to(device)

    def forward(self, x):
        grid = self.get_grid(x.shape, x.device)
        x = torch.cat((x, grid), dim=-1)
        x = self.p(x).permute(0, 3, 1, 2)
        for i, (conv, w) in enumerate(zip(self.convs, self.ws, strict=False)):
            x = conv(x) + w(x)
            if i < 3:
                x = F.gelu(x)
        x = x.permute(0, 2, 3, 1)
        return self.q2(F.gelu(self.q1(x)))


class LpLoss:
    def rel(self, x, y):
        n = x.size(0)
        diff = torch.norm(x.reshape(n, -1) - y.reshape(n, -1), 2, 1)
        ynorm = torch.norm(y.reshape(n, -1), 2, 1)
        return torch.sum(diff / ynorm)

    def __call__(self, x, y):
        return self.rel(x, y)


def fields(n, s):
    return torch.randn(n, s, s, T_IN + T, generator=gen).to(device)


def rollout(model, data):
    xx, yy = data[..., :T_IN], data[..., T_IN:]
    loss = 0
    pred = None
    for t in range(T):
        y = yy[..., t : t + 1]
        im = model(xx)
        loss = loss + myloss(im.reshape(im.size(0), -1), y.reshape(y.size(0), -1))
        pred = im if pred is None else torch.cat((pred, im), -1)
        xx = torch.cat((xx[..., 1:], im), dim=-1)
    return loss, pred


model = FNO2d(MODES, MODES, WIDTH).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
myloss = LpLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    data = fields(B, S)
    loss, _ = rollout(model, data)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item() / (B * T):.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        torch.cuda.reset_peak_memory_stats()

model.eval()
test_l2 = 0.0
with torch.no_grad():
    for _i in range(0, EVAL_N, B):
        loss, pred = rollout(model, fields(B, S))
        test_l2 += loss.item()
print(f"test l2 {test_l2 / (EVAL_N * T):.4f}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    loss, pred = rollout(model, fields(HI_B, S_HI))
print(f"super-resolution {S_HI}: l2 {loss.item() / (HI_B * T):.4f} pred {tuple(pred.shape)}")
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}")
