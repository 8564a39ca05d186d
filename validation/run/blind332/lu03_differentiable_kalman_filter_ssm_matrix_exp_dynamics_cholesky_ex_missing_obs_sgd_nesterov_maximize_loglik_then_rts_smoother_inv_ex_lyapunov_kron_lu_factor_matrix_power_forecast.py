"""System identification of a linear-Gaussian state-space model by maximum likelihood through a
differentiable Kalman filter: the transition is torch.linalg.matrix_exp of a damped skew-symmetric
generator, the emission an nn.Linear, process noise L L^T, per-sequence observation noise inflated
where observations are missing (a fixed random mask, no value-dependent branching). Each of the T
filter steps factorises the innovation covariance with torch.linalg.cholesky_ex and solves with
cholesky_solve; the summed log-likelihood is maximised with SGD(nesterov=True, maximize=True) under a
CosineAnnealingWarmRestarts schedule. Then, under no_grad, a Rauch-Tung-Striebel smoother pass
(gains via torch.linalg.inv_ex), the stationary covariance from the discrete Lyapunov equation in
Kronecker form (torch.kron, torch.linalg.lu_factor / lu_solve), and k-step forecasts with
torch.linalg.matrix_power and torch.linalg.multi_dot.

Phases: 0 simulated data and model; 1 maximum-likelihood training; 2 RTS smoothing; 3 Lyapunov
stationary covariance and forecasts."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3323)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, T, NX, NY, STEPS, HORIZON = 8, 10, 4, 6, 3, 5
else:
    B, T, NX, NY, STEPS, HORIZON = 512, 96, 32, 48, 5, 64


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class SSM(nn.Module):
    def __init__(self):
        super().__init__()
        self.gen = nn.Parameter(torch.randn(NX, NX) * 0.1)
        self.damp = nn.Parameter(torch.full((NX,), -2.0))
        self.emit = nn.Linear(NX, NY, bias=False)
        self.q_tril = nn.Parameter(torch.eye(NX) * 0.3)
        self.r_log = nn.Parameter(torch.full((NY,), -1.0))

    def transition(self):
        skew = 0.5 * (self.gen - self.gen.T)
        return torch.linalg.matrix_exp(0.1 * (skew - torch.diag(F.softplus(self.damp))))

    def noises(self):
        L = torch.tril(self.q_tril)
        return L @ L.T + 1e-4 * torch.eye(NX, device=L.device), torch.exp(self.r_log)


def kalman_filter(model, y, miss):
    A = model.transition()
    H = model.emit.weight
    Q, r = model.noises()
    R = torch.diag_embed(r + 1e3 * miss)  # (B, T, NY, NY): missing observations get huge noise
    x = y.new_zeros(B, NX)
    P = torch.eye(NX, device=y.device).expand(B, NX, NX)
    ll = y.new_zeros(B)
    means, covs, pred_means, pred_covs = [], [], [], []
    for t in range(T):
        x_pred = x @ A.T
        P_pred = A @ P @ A.T + Q
        S = H @ P_pred @ H.T + R[:, t]
        L, info = torch.linalg.cholesky_ex(S)
        e = (y[:, t] - x_pred @ H.T).unsqueeze(-1)
        Sinv_e = torch.cholesky_solve(e, L)
        ll = ll - 0.5 * (
            (e * Sinv_e).sum((-2, -1)) + 2 * torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        )
        K = torch.cholesky_solve(H @ P_pred, L).transpose(-1, -2)
        x = x_pred + (K @ e).squeeze(-1)
        P = P_pred - K @ H @ P_pred
        means.append(x)
        covs.append(P)
        pred_means.append(x_pred)
        pred_covs.append(P_pred)
    return ll - 0.5 * T * NY * math.log(2 * math.pi), (means, covs, pred_means, pred_covs)


with torch.no_grad():
    truth = SSM().to(device)
    A_true = truth.transition()
    xs = torch.zeros(B, NX, device=device)
    ys = []
    for t in range(T):
        xs = xs @ A_true.T + 0.3 * torch.randn(B, NX, device=device)
        ys.append(truth.emit(xs) + 0.3 * torch.randn(B, NY, device=device))
    y = torch.stack(ys, 1)
miss = (torch.rand(B, T, NY, device=device) < 0.1).float()
model = SSM().to(device)
report("simulated data and model")

opt = torch.optim.SGD(model.parameters(), lr=1e-5, momentum=0.9, nesterov=True, maximize=True)
sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2)
for step in range(STEPS):
    ll, _ = kalman_filter(model, y, miss)
    objective = ll.mean()
    opt.zero_grad(set_to_none=True)
    objective.backward()
    opt.step()
    sched.step()
report("maximum-likelihood training")

with torch.no_grad():
    ll, (means, covs, pred_means, pred_covs) = kalman_filter(model, y, miss)
    A = model.transition()
    xs_s, Ps_s = means[-1], covs[-1]
    smoothed = [xs_s]
    for t in range(T - 2, -1, -1):
        inv, info = torch.linalg.inv_ex(pred_covs[t + 1])
        G = covs[t] @ A.T @ inv
        xs_s = means[t] + (G @ (xs_s - pred_means[t + 1]).unsqueeze(-1)).squeeze(-1)
        Ps_s = covs[t] + G @ (Ps_s - pred_covs[t + 1]) @ G.transpose(-1, -2)
        smoothed.append(xs_s)
    smoothed = torch.stack(smoothed[::-1], 1)
    recon = F.mse_loss(model.emit(smoothed), y)
report("RTS smoothing")

with torch.no_grad():
    Q, r = model.noises()
    eye = torch.eye(NX * NX, device=device)
    LU, piv = torch.linalg.lu_factor(eye - torch.kron(A, A))
    P_inf = torch.linalg.lu_solve(LU, piv, Q.reshape(-1, 1)).reshape(NX, NX)
    H = model.emit.weight
    forecasts, bands = [], []
    for k in range(1, HORIZON + 1):
        Ak = torch.linalg.matrix_power(A, k)
        forecasts.append(means[-1] @ Ak.T @ H.T)
        bands.append(torch.linalg.multi_dot([H, Ak, P_inf, Ak.T, H.T]).diagonal() + r)
    forecasts = torch.stack(forecasts, 1)
    bands = torch.stack(bands)
print("ll", float(ll.mean()), "recon", float(recon), "fc", forecasts.shape, float(bands.mean()))
report("Lyapunov and forecasts")
