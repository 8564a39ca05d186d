"""Time-series forecasting trained with the soft-DTW divergence (Cuturi & Blondel 2017; Blondel et al.
2021), the loss computed the way Maghoumi's pytorch-softdtw-cuda structures it, with its CUDA kernel
replaced by a pure-PyTorch anti-diagonal wavefront: `SoftDTW` builds the squared-Euclidean cost
matrix D (B, N, M) from the two sequences (x^2 + y^2 - 2 x y^T by `bmm`) and hands it to a
`torch.autograd.Function` whose forward fills R (B, N+2, M+2; R[0, 0] = 0, the border +inf) one
anti-diagonal at a time (for p = i + j, precomputed index tensors (i, j) of that diagonal; the soft
minimum of R[i-1, j-1], R[i-1, j], R[i, j-1] by a max-shifted log-sum-exp, written into R by advanced
indexing), saves D and R, and whose backward pads D and R, sets R's last row and column to -inf and
fills E (B, N+2, M+2) on the reversed diagonals (E[i, j] = a E[i+1, j] + b E[i, j+1] + c E[i+1, j+1]
with a, b, c the exponentials of R's and D's differences over gamma), returning E[:, 1:-1, 1:-1]
times the incoming gradient. The divergence is sdtw(x, y) - (sdtw(x, x) + sdtw(y, y)) / 2: three
wavefronts a step. The forecaster (DILATE-style): a 1-layer cuDNN GRU encoder (hidden 256) over 256
steps of 8 channels and a linear head emitting the whole 128-step, 8-channel forecast. fp32.
Phase 1: 4 Adam steps at batch 2,048 (soft-DTW divergence + 0.1 MSE, gamma 0.1). Phase 2: no_grad
evaluation at batch 4,096 (soft-DTW of prediction vs target and MSE), the model left in training
mode as the loop leaves it (cuDNN's GRU then keeps its training reserve under no_grad). Seeded, fixed sizes.
2 phases + end."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2793)
dev = "cuda"
HIST, HORIZON, CH, HID = 256, 128, 8, 256


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def diagonals(n, m, device):
    out = []
    for p in range(2, n + m + 1):
        i = torch.arange(max(1, p - m), min(n, p - 1) + 1, device=device)
        out.append((i, p - i))
    return out


class _SoftDTW(torch.autograd.Function):
    @staticmethod
    def forward(ctx, D, gamma, diags):
        b, n, m = D.shape
        R = torch.full((b, n + 2, m + 2), float("inf"), device=D.device, dtype=D.dtype)
        R[:, 0, 0] = 0
        for i, j in diags:
            r0 = -R[:, i - 1, j - 1] / gamma
            r1 = -R[:, i - 1, j] / gamma
            r2 = -R[:, i, j - 1] / gamma
            rmax = torch.maximum(torch.maximum(r0, r1), r2)
            rsum = torch.exp(r0 - rmax) + torch.exp(r1 - rmax) + torch.exp(r2 - rmax)
            softmin = -gamma * (torch.log(rsum) + rmax)
            R[:, i, j] = D[:, i - 1, j - 1] + softmin
        ctx.save_for_backward(D, R)
        ctx.gamma, ctx.diags = gamma, diags
        return R[:, -2, -2]

    @staticmethod
    def backward(ctx, grad_output):
        D, R = ctx.saved_tensors
        gamma = ctx.gamma
        b, n, m = D.shape
        D_ = torch.zeros((b, n + 2, m + 2), dtype=D.dtype, device=D.device)
        D_[:, 1 : n + 1, 1 : m + 1] = D
        R = R.clone()
        R[:, :, -1] = -float("inf")
        R[:, -1, :] = -float("inf")
        R[:, -1, -1] = R[:, -2, -2]
        E = torch.zeros((b, n + 2, m + 2), dtype=D.dtype, device=D.device)
        E[:, -1, -1] = 1
        for i, j in reversed(ctx.diags):
            r = R[:, i, j]
            a = torch.exp((R[:, i + 1, j] - r - D_[:, i + 1, j]) / gamma)
            bb = torch.exp((R[:, i, j + 1] - r - D_[:, i, j + 1]) / gamma)
            c = torch.exp((R[:, i + 1, j + 1] - r - D_[:, i + 1, j + 1]) / gamma)
            E[:, i, j] = E[:, i + 1, j] * a + E[:, i, j + 1] * bb + E[:, i + 1, j + 1] * c
        return grad_output.view(-1, 1, 1) * E[:, 1 : n + 1, 1 : m + 1], None, None


class SoftDTW(nn.Module):
    def __init__(self, gamma, n, m):
        super().__init__()
        self.gamma = gamma
        self.diags = diagonals(n, m, dev)

    @staticmethod
    def _calc_distance_matrix(x, y):
        x2 = (x * x).sum(-1, keepdim=True)
        y2 = (y * y).sum(-1).unsqueeze(1)
        return (x2 + y2 - 2 * torch.bmm(x, y.transpose(1, 2))).clamp_min(0)

    def forward(self, x, y):
        return _SoftDTW.apply(self._calc_distance_matrix(x, y), self.gamma, self.diags)

    def divergence(self, x, y):
        return self(x, y) - 0.5 * (self(x, x) + self(y, y))


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(CH, HID, num_layers=1, batch_first=True)
        self.head = nn.Sequential(nn.Linear(HID, 1024), nn.ReLU(), nn.Linear(1024, HORIZON * CH))

    def forward(self, hist):
        _, h = self.gru(hist)
        return self.head(h[-1]).view(-1, HORIZON, CH)


def synthetic_batch(b, gen):
    t = torch.arange(HIST + HORIZON, device=dev, dtype=torch.float32)
    freq = torch.rand(b, 1, CH, device=dev, generator=gen) * 0.2 + 0.02
    shift = torch.rand(b, 1, CH, device=dev, generator=gen) * 6.28
    series = torch.sin(t[None, :, None] * freq + shift)
    series = series + 0.1 * torch.randn(series.shape, device=dev, generator=gen)
    return series[:, :HIST], series[:, HIST:]


model = Forecaster().to(dev)
sdtw = SoftDTW(gamma=0.1, n=HORIZON, m=HORIZON)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
gen = torch.Generator(device=dev)
gen.manual_seed(2793)
report("setup")

for step in range(4):
    hist, target = synthetic_batch(2048, gen)
    pred = model(hist)
    loss = sdtw.divergence(pred, target).mean() + 0.1 * F.mse_loss(pred, target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
    del pred, loss
report("train")

with torch.no_grad():
    hist, target = synthetic_batch(4096, gen)
    pred = model(hist)
    d = sdtw(pred, target).mean()
    mse = F.mse_loss(pred, target)
    print(f"eval sdtw {d.item():.4f} mse {mse.item():.4f}")
report("eval")
print("done")
