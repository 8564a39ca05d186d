"""DimeNet++ written from the paper: radius graphs (cutoff 5) found per molecule from pairwise
difference norms and `nonzero`, triplets k->j->i built by hand from the edges sorted by target
(`repeat_interleave` of the in-degrees, k != i), a Bessel radial basis with the polynomial envelope
and a spherical basis of Legendre polynomials of the angle (atan2 of cross and dot) times sines of
the distance, embedding, 4 interaction-PP blocks (down-projected triplet messages summed by
`index_add`) and output blocks; energies and forces (-dE/dpos by
`autograd.grad(create_graph=True)`), fp32 with TF32 matmuls, AdamW with an EMA copy of the weights
(AveragedModel), 3 training steps, then forces from the EMA model on a fresh batch; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12501)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
MOLS, ATOMS, BOX = (4, 10, 4.0) if SMALL else (40, 40, 7.0)
HID, INT_EMB, BASIS_EMB, OUT_EMB = (32, 16, 8, 32) if SMALL else (128, 64, 8, 256)
N_RAD, N_SPH, BLOCKS = 6, 7, (2 if SMALL else 4)
CUTOFF = 5.0
device = "cuda" if torch.cuda.is_available() else "cpu"


def envelope(x, p=6):
    a, b, c = -(p + 1) * (p + 2) / 2, p * (p + 2), -p * (p + 1) / 2
    return 1 / x + a * x ** (p - 1) + b * x**p + c * x ** (p + 1)


def legendre(x, lmax):
    out = [torch.ones_like(x), x]
    for n in range(1, lmax - 1):
        out.append(((2 * n + 1) * x * out[-1] - n * out[-2]) / (n + 1))
    return torch.stack(out[:lmax], -1)


class BesselBasis(nn.Module):
    def __init__(self):
        super().__init__()
        self.freq = nn.Parameter(torch.arange(1, N_RAD + 1).float() * math.pi)

    def forward(self, d):
        x = (d / CUTOFF)[:, None]
        return envelope(x) * torch.sin(self.freq * x)


def spherical_basis(d, angle, idx_kj):
    x = (d / CUTOFF)[:, None, None]
    n = torch.arange(1, N_RAD + 1, device=d.device)
    ll = torch.arange(N_SPH, device=d.device)
    rad = envelope(x) * torch.sin((n[None, :] + ll[:, None] / 2) * math.pi * x)  # (E, L, R)
    cbf = legendre(torch.cos(angle), N_SPH)  # (T, L)
    return (rad[idx_kj] * cbf[:, :, None]).reshape(-1, N_SPH * N_RAD)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(HID, HID), nn.Linear(HID, HID)

    def forward(self, x):
        return x + F.silu(self.l2(F.silu(self.l1(x))))


class InteractionPP(nn.Module):
    def __init__(self):
        super().__init__()
        self.rbf1, self.rbf2 = nn.Linear(N_RAD, BASIS_EMB, bias=False), nn.Linear(BASIS_EMB, HID, bias=False)
        self.sbf1 = nn.Linear(N_SPH * N_RAD, BASIS_EMB, bias=False)
        self.sbf2 = nn.Linear(BASIS_EMB, INT_EMB, bias=False)
        self.kj, self.ji = nn.Linear(HID, HID), nn.Linear(HID, HID)
        self.down, self.up = nn.Linear(HID, INT_EMB, bias=False), nn.Linear(INT_EMB, HID, bias=False)
        self.before = Residual()
        self.lin = nn.Linear(HID, HID)
        self.after = nn.Sequential(Residual(), Residual())

    def forward(self, m, rbf, sbf, idx_kj, idx_ji):
        x_ji = F.silu(self.ji(m))
        x_kj = F.silu(self.kj(m)) * self.rbf2(self.rbf1(rbf))
        x_kj = F.silu(self.down(x_kj))
        x_kj = x_kj[idx_kj] * self.sbf2(self.sbf1(sbf))
        agg = x_kj.new_zeros(m.shape[0], INT_EMB).index_add_(0, idx_ji, x_kj)
        h = x_ji + F.silu(self.up(agg))
        h = F.silu(self.lin(self.before(h))) + m
        return self.after(h)


class OutputPP(nn.Module):
    def __init__(self):
        super().__init__()
        self.rbf = nn.Linear(N_RAD, HID, bias=False)
        self.up = nn.Linear(HID, OUT_EMB, bias=False)
        self.mlp = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(OUT_EMB, OUT_EMB), nn.SiLU())])
        self.out = nn.Linear(OUT_EMB, 1, bias=False)

    def forward(self, m, rbf, row, n_atoms):
        x = self.rbf(rbf) * m
        x = x.new_zeros(n_atoms, HID).index_add_(0, row, x)
        return self.out(self.mlp(self.up(x)))


class DimeNetPP(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(95, HID)
        self.rbf = BesselBasis()
        self.rbf_lin = nn.Linear(N_RAD, HID)
        self.edge = nn.Linear(3 * HID, HID)
        self.blocks = nn.ModuleList(InteractionPP() for _ in range(BLOCKS))
        self.outs = nn.ModuleList(OutputPP() for _ in range(BLOCKS + 1))

    def forward(self, z, pos, batch, row, col, idx_kj, idx_ji):
        vec = pos[row] - pos[col]
        d = vec.norm(dim=-1)
        pos_ji, pos_kj = vec[idx_ji], vec[idx_kj]
        a = (pos_ji * pos_kj).sum(-1)
        b = torch.cross(pos_ji, pos_kj, dim=-1).norm(dim=-1)
        angle = torch.atan2(b, a)
        rbf = self.rbf(d)
        sbf = spherical_basis(d, angle, idx_kj)
        x = self.emb(z)
        m = F.silu(self.edge(torch.cat([x[row], x[col], F.silu(self.rbf_lin(rbf))], -1)))
        atom_e = self.outs[0](m, rbf, row, z.shape[0])
        for blk, out in zip(self.blocks, self.outs[1:], strict=True):
            m = blk(m, rbf, sbf, idx_kj, idx_ji)
            atom_e = atom_e + out(m, rbf, row, z.shape[0])
        return atom_e.new_zeros(MOLS).index_add_(0, batch, atom_e[:, 0])


def make_batch():
    pos = torch.rand(MOLS, ATOMS, 3, device=device) * BOX
    z = torch.randint(1, 10, (MOLS * ATOMS,), device=device)
    d = (pos[:, :, None] - pos[:, None]).norm(dim=-1)
    mask = (d < CUTOFF) & ~torch.eye(ATOMS, dtype=torch.bool, device=device)
    mol, i, j = mask.nonzero(as_tuple=True)
    row, col = mol * ATOMS + i, mol * ATOMS + j  # edge j -> i, sorted by target i
    deg = torch.bincount(row, minlength=MOLS * ATOMS)
    ptr = torch.cumsum(deg, 0) - deg
    n_trip = deg[col]
    idx_ji = torch.arange(row.numel(), device=device).repeat_interleave(n_trip)
    offset = torch.arange(idx_ji.numel(), device=device) - (
        torch.cumsum(n_trip, 0) - n_trip
    ).repeat_interleave(n_trip)
    idx_kj = ptr[col].repeat_interleave(n_trip) + offset
    keep = col[idx_kj] != row[idx_ji]
    idx_kj, idx_ji = idx_kj[keep], idx_ji[keep]
    batch = torch.arange(MOLS, device=device).repeat_interleave(ATOMS)
    pos = pos.reshape(-1, 3).requires_grad_()
    energy = torch.randn(MOLS, device=device)
    forces = torch.randn(MOLS * ATOMS, 3, device=device)
    return z, pos, batch, row, col, idx_kj, idx_ji, energy, forces


model = DimeNetPP().to(device)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2, amsgrad=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    z, pos, batch, row, col, idx_kj, idx_ji, e_ref, f_ref = make_batch()
    energy = model(z, pos, batch, row, col, idx_kj, idx_ji)
    forces = -torch.autograd.grad(energy.sum(), pos, create_graph=True)[0]
    loss = F.mse_loss(energy, e_ref) + 100 * F.mse_loss(forces, f_ref)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ema.update_parameters(model)
    if device == "cuda":
        print(
            f"step {step} edges {row.numel()} triplets {idx_kj.numel()} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del energy, forces, loss, pos

z, pos, batch, row, col, idx_kj, idx_ji, _, _ = make_batch()
energy = ema.module(z, pos, batch, row, col, idx_kj, idx_ji)
forces = -torch.autograd.grad(energy.sum(), pos)[0]
if device == "cuda":
    print(
        f"ema forces {tuple(forces.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
