"""Deep Koopman autoencoder with dynamic mode decomposition in the loop (in the spirit of Lusch et al.
2018 and DLDMD): an MLP encoder lifts states of a nonlinear system into a 32-d latent space, the Koopman
matrix is fitted to the latent snapshots in every step by least squares (`torch.linalg.lstsq`, driver
gels: QR on CUDA), diagonalized with `torch.linalg.eig` (non-symmetric: complex eigenvalues and
eigenvectors; on CUDA 12.8+ builds PyTorch 2.11 runs cuSOLVER's `cusolverDnXgeev` per matrix with one
device workspace and one host workspace), and the latent trajectory is rolled out spectrally,
z_t = V diag(lambda^t) V^-1 z_0 (complex `linalg.solve`, complex exp/log, real part), so the loss
back-propagates through eig's complex backward (which checks the loss is invariant to the eigenvectors'
phases -- it is). The DMD part is in float64 / complex128 (numerics), the encoder and decoder
(256-1024-1024-32 and back) in fp32 with Adam. Synthetic trajectories of a fixed random nonlinear map
x' = tanh(A x) + 0.1 sin(x), 512 trajectories of 65 states (64 transitions) of 256-d states, made on
the GPU once.
Phase 1: 4 steps with one global Koopman matrix (lstsq of (512 * 64) x 32 snapshots, one 32 x 32 eig;
its backward, `linalg_lstsq_backward` through `pinv_backward`, forms two 32,768 x 32,768 float64
products).
Phase 2: 4 steps with a Koopman matrix per trajectory (batched lstsq (512, 64, 32), batched eig of
512 matrices 32 x 32). Phase 3: 65-state spectral forecasts of 512 new trajectories under
inference_mode with `torch.linalg.eigvals` checks. Seeded. Fixed sizes. 4 phases."""

import torch
from torch import nn

torch.manual_seed(2725)
dev = "cuda"
B, T, X, Z = 512, 65, 256, 32


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def mlp(dims):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.ELU())
    return nn.Sequential(*layers)


A = torch.randn(X, X, device=dev) / X**0.5 * 1.1


@torch.no_grad()
def trajectories(n):
    x = torch.randn(n, X, device=dev)
    out = torch.empty(n, T, X, device=dev)
    for t in range(T):
        out[:, t] = x
        x = torch.tanh(x @ A.T) + 0.1 * torch.sin(x)
    return out


enc, dec = mlp([X, 1024, 1024, Z]).to(dev), mlp([Z, 1024, 1024, X]).to(dev)
opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)
data = trajectories(B)
test = trajectories(B)
tsteps = torch.arange(T, device=dev, dtype=torch.float64)
report("setup")


def spectral_rollout(K, z0):
    """K (..., Z, Z) acting on row vectors z_{t+1} = z_t K; z0 (..., n, Z) -> (..., n, T, Z)."""
    lam, V = torch.linalg.eig(K.transpose(-2, -1))  # column-vector form K^T
    c = torch.linalg.solve(V, z0.to(V.dtype).transpose(-2, -1))  # (..., Z, n)
    loglam = torch.log(lam)
    loglam = torch.complex(loglam.real.clamp(max=0.05), loglam.imag)  # |lambda^t| <= e^3.15
    powers = torch.exp(tsteps[:, None] * loglam.unsqueeze(-2))  # (..., T, Z)
    zt = V.unsqueeze(-3) @ (powers.unsqueeze(-1) * c.unsqueeze(-3))  # (..., T, Z, n)
    return zt.real.movedim(-1, -3)  # (..., n, T, Z)


def step(per_trajectory):
    x = data
    z = enc(x.reshape(-1, X)).view(B, T, Z)
    recon = dec(z.reshape(-1, Z)).view(B, T, X)
    z64 = z.double()
    if per_trajectory:
        K = torch.linalg.lstsq(z64[:, :-1], z64[:, 1:]).solution  # (B, Z, Z)
        zr = spectral_rollout(K, z64[:, :1]).squeeze(-3)  # (B, T, Z)
    else:
        K = torch.linalg.lstsq(z64[:, :-1].reshape(-1, Z), z64[:, 1:].reshape(-1, Z)).solution
        zr = spectral_rollout(K, z64[:, 0])  # (B, T, Z)
    xr = dec(zr.float().reshape(-1, Z)).view(B, T, X)
    loss = (recon - x).pow(2).mean() + (zr - z64).pow(2).mean().float() + (xr - x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([*enc.parameters(), *dec.parameters()], 1.0)
    opt.step()
    return loss.item()


for _ in range(4):
    print("global koopman loss", step(False))
report("global")
for _ in range(4):
    print("per-trajectory koopman loss", step(True))
report("per_trajectory")

with torch.inference_mode():
    z = enc(test.reshape(-1, X)).view(B, T, Z).double()
    K = torch.linalg.lstsq(z[:, :-1].reshape(-1, Z), z[:, 1:].reshape(-1, Z)).solution
    lam = torch.linalg.eigvals(K)
    zr = spectral_rollout(K, z[:, 0])
    err = (dec(zr.float().reshape(-1, Z)).view(B, T, X) - test).pow(2).mean()
    print("forecast mse", err.item(), "spectral radius", lam.abs().max().item())
report("forecast")
