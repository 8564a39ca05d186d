"""Direction-of-arrival estimation for a uniform linear array, done the signal-processing way and the
deep-learning way, all in complex arithmetic: classic MUSIC in complex128 next to a complex-valued MLP
(`nn.Linear(dtype=torch.cfloat)`, modReLU) trained on sample covariances, then an FFT beam scan and a
singular-value look at the snapshots.

Array: 16 antennas at half a wavelength, 3 sources at random angles, 256 snapshots, 2,048 scenarios per
batch, SNR 10 dB. Phases: (1) simulation in complex64: steering matrices `torch.polar(1, -pi m sin theta)`,
complex Gaussian sources and noise via `torch.complex`, snapshots by complex `bmm`, sample covariances
R = X X^H / T; (2) MUSIC: R to `torch.cdouble`, batched `torch.linalg.eigh`, noise subspace of 13 vectors,
pseudo-spectrum on a 1,801-point grid by `einsum` with the grid's steering vectors, `topk` peaks;
(3) a complex-valued MLP on the covariances' upper triangles (136 complex inputs -> 512 -> 512 ->
181 bins, modReLU `relu(|z| + b) * sgn(z)`, logits `|z|`), 8 Adam steps (complex parameters) with
multi-label BCE over fresh batches; (4) FFT beam scan: `torch.fft.fft(X, n=512, dim=1)`, power averaged
over snapshots, `fftshift`, the array calibrated by learning per-antenna complex gains (a cfloat leaf) with
autograd through the FFT, 5 Adam steps; (5) `torch.linalg.svdvals` of 512 snapshot matrices (16 x 256,
complex64) and the model's accuracy under `torch.no_grad`."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(30904)
device = "cuda" if torch.cuda.is_available() else "cpu"
M, SRC, T, BATCH, GRID, BINS = 16, 3, 256, 2048, 1801, 181
ant = torch.arange(M, device=device, dtype=torch.float32)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def steering(theta):
    """theta (..., K) radians -> (..., M, K) complex64."""
    phase = -math.pi * ant[:, None] * torch.sin(theta)[..., None, :]
    return torch.polar(torch.ones_like(phase), phase)


def cgauss(*shape, scale=1.0):
    s = scale / math.sqrt(2)
    return torch.complex(torch.randn(*shape, device=device) * s, torch.randn(*shape, device=device) * s)


def simulate(batch):
    theta = (torch.rand(batch, SRC, device=device) - 0.5) * math.pi * 0.9
    A = steering(theta)
    X = torch.bmm(A, cgauss(batch, SRC, T)) + cgauss(batch, M, T, scale=10 ** (-10 / 20))
    R = X @ X.mH / T
    return theta, X, R


# Phase 1: simulation.
theta, X, R = simulate(BATCH)
print("trace mean", R.diagonal(dim1=-2, dim2=-1).real.sum(-1).mean().item())
report("phase 1 simulation")

# Phase 2: MUSIC in complex128.
grid = torch.linspace(-math.pi / 2, math.pi / 2, GRID, device=device, dtype=torch.float64)
a_grid = torch.polar(
    torch.ones(M, GRID, device=device, dtype=torch.float64),
    -math.pi * ant.double()[:, None] * torch.sin(grid),
)
evals, evecs = torch.linalg.eigh(R.to(torch.cdouble))
En = evecs[..., : M - SRC]
proj = torch.einsum("bmk,mg->bkg", En.conj(), a_grid)
spectrum = 1.0 / proj.abs().pow(2).sum(1)
peaks = spectrum.topk(SRC, dim=-1).indices
est = grid[peaks].sort(-1).values
print("music rmse (deg)", torch.rad2deg((est - theta.double().sort(-1).values).pow(2).mean().sqrt()).item())
del proj, spectrum, evecs
report("phase 2 music")


# Phase 3: a complex-valued MLP.
class ModReLU(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.b = nn.Parameter(torch.zeros(n))

    def forward(self, z):
        return F.relu(z.abs() + self.b) * torch.sgn(z)


class ComplexMLP(nn.Module):
    def __init__(self):
        super().__init__()
        n_in = M * (M + 1) // 2
        self.net = nn.Sequential(
            nn.Linear(n_in, 512, dtype=torch.cfloat),
            ModReLU(512),
            nn.Linear(512, 512, dtype=torch.cfloat),
            ModReLU(512),
            nn.Linear(512, BINS, dtype=torch.cfloat),
        )

    def forward(self, R):
        iu = torch.triu_indices(M, M, device=R.device)
        return self.net(R[:, iu[0], iu[1]]).abs()


def targets(theta):
    bins = ((torch.rad2deg(theta) + 90).round().long()).clamp(0, BINS - 1)
    return torch.zeros(theta.shape[0], BINS, device=device).scatter_(1, bins, 1.0)


net = ComplexMLP().to(device)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for _ in range(8):
    th, _, Rb = simulate(BATCH)
    loss = F.binary_cross_entropy_with_logits(net(Rb) - 3.0, targets(th))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("cvnn loss", loss.item())
del loss, Rb
report("phase 3 complex mlp")

# Phase 4: FFT beam scan with learned complex gains.
gains = torch.ones(M, dtype=torch.cfloat, device=device).requires_grad_()
cal_opt = torch.optim.Adam([gains], lr=1e-2)
ref = torch.polar(torch.ones(M, device=device), 0.3 * torch.randn(M, device=device))
for _ in range(5):
    Xc = X[:512] * (ref * gains)[None, :, None]
    beams = torch.fft.fftshift(torch.fft.fft(Xc, n=512, dim=1), dim=1)
    power = beams.abs().pow(2).mean(-1)
    loss = -(power.max(-1).values / power.mean(-1)).mean()
    cal_opt.zero_grad(set_to_none=True)
    loss.backward()
    cal_opt.step()
print("beam contrast", -loss.item())
del beams, power, Xc, loss
report("phase 4 fft beam scan")

# Phase 5: singular values and accuracy.
with torch.no_grad():
    sv = torch.linalg.svdvals(X[:512])
    pred = net(R).topk(SRC, dim=-1).indices
    hit = targets(theta).gather(1, pred).mean()
print("sv ratio", (sv[:, SRC - 1] / sv[:, SRC]).mean().item(), "bin hit rate", hit.item())
report("phase 5 svdvals and eval")
