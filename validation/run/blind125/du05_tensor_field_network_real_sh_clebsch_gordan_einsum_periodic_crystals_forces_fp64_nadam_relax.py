"""A NequIP-like tensor field network written by hand in float64 (torch.set_default_dtype): real
spherical harmonics up to l = 2 written out, real Clebsch-Gordan coefficients computed on the host
from the Racah formula and the complex-to-real change of basis, 15 paths per convolution, each a
4-operand `torch.einsum` of the neighbour features, the edge harmonics, the coefficients and
per-channel radial weights from a Bessel-basis MLP, messages summed by `index_add_`, gated
nonlinearities, 3 layers of 32 channels per l; periodic crystals (16 cells of 64 atoms jittered from
a cubic lattice) with neighbours by the minimum image convention within 4.5 A (`nonzero`); energies
and forces (`autograd.grad(create_graph=True)`), NAdam, 3 training steps, then 4 steepest-descent
relaxation steps from forces without a graph over one neighbour list; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12505)
torch.set_default_dtype(torch.float64)
CELLS, ATOMS, BOX = (2, 8, 6.0) if SMALL else (16, 64, 10.0)
CH, LAYERS, N_BESSEL, CUTOFF, LMAX = (8, 2, 8, 4.5, 2) if SMALL else (32, 3, 8, 4.5, 2)
device = "cuda" if torch.cuda.is_available() else "cpu"


def su2_cg(j1, m1, j2, m2, j3, m3):
    if m3 != m1 + m2:
        return 0.0
    f = math.factorial
    vmin = max(-j1 + j2 + m3, -j1 + m1, 0)
    vmax = min(j2 + j3 + m1, j3 - j1 + j2, j3 + m3)
    c = (
        (2 * j3 + 1)
        * f(j3 + j1 - j2)
        * f(j3 - j1 + j2)
        * f(j1 + j2 - j3)
        * f(j3 + m3)
        * f(j3 - m3)
        / (f(j1 + j2 + j3 + 1) * f(j1 - m1) * f(j1 + m1) * f(j2 - m2) * f(j2 + m2))
    ) ** 0.5
    s = sum(
        (-1) ** (v + j2 + m2)
        / f(v)
        * f(j2 + j3 + m1 - v)
        * f(j1 - m1 + v)
        / f(j3 - j1 + j2 - v)
        / f(j3 + m3 - v)
        / f(v + j1 - j2 - m3)
        for v in range(vmin, vmax + 1)
    )
    return c * s


def real_to_complex(l):  # noqa: E741
    q = torch.zeros(2 * l + 1, 2 * l + 1, dtype=torch.complex128)
    r = 1 / math.sqrt(2)
    for m in range(-l, 0):
        q[l + m, l + abs(m)] = r
        q[l + m, l - abs(m)] = -1j * r
    q[l, l] = 1
    for m in range(1, l + 1):
        q[l + m, l + abs(m)] = (-1) ** m * r
        q[l + m, l - abs(m)] = 1j * (-1) ** m * r
    return (-1j) ** l * q


def so3_cg(l1, l2, l3):
    c = torch.zeros(2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1, dtype=torch.complex128)
    for m1 in range(-l1, l1 + 1):
        for m2 in range(-l2, l2 + 1):
            if abs(m1 + m2) <= l3:
                c[l1 + m1, l2 + m2, l3 + m1 + m2] = su2_cg(l1, m1, l2, m2, l3, m1 + m2)
    q1, q2, q3 = real_to_complex(l1), real_to_complex(l2), real_to_complex(l3)
    c = torch.einsum("ij,kl,mn,ikn->jlm", q1, q2, q3.conj().T, c)
    c = c.real if c.real.abs().sum() > c.imag.abs().sum() else c.imag
    return c / c.norm()


def real_sh(v):
    x, y, z = F.normalize(v, dim=-1).unbind(-1)
    s3, s5, s15 = math.sqrt(3), math.sqrt(5), math.sqrt(15)
    return [
        torch.ones_like(x)[:, None],
        s3 * torch.stack([y, z, x], -1),
        torch.stack(
            [s15 * x * y, s15 * y * z, s5 / 2 * (3 * z * z - 1), s15 * x * z, s15 / 2 * (x * x - y * y)], -1
        ),
    ]


PATHS = [
    (l1, l2, l3)
    for l1 in range(LMAX + 1)
    for l2 in range(LMAX + 1)
    for l3 in range(abs(l1 - l2), min(l1 + l2, LMAX) + 1)
]


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        for p in PATHS:
            self.register_buffer("cg_{}{}{}".format(*p), so3_cg(*p))
        self.radial = nn.Sequential(
            nn.Linear(N_BESSEL, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, len(PATHS) * CH)
        )
        self.self_int = nn.ParameterList(nn.Parameter(torch.randn(CH, CH) / CH**0.5) for _ in range(LMAX + 1))
        self.gate = nn.Linear(CH, LMAX * CH)

    def forward(self, h, sh, rbf, src, dst, n_atoms):
        w = self.radial(rbf).view(-1, len(PATHS), CH)
        out = [h[0].new_zeros(n_atoms, CH, 2 * l + 1) for l in range(LMAX + 1)]  # noqa: E741
        for p, (l1, l2, l3) in enumerate(PATHS):
            cg = getattr(self, f"cg_{l1}{l2}{l3}")
            msg = torch.einsum("eci,ej,ijk,ec->eck", h[l1][src], sh[l2], cg, w[:, p])
            out[l3].index_add_(0, dst, msg / 16.0)
        out = [
            torch.einsum("ncm,cd->ndm", o, wl) + hl for o, wl, hl in zip(out, self.self_int, h, strict=True)
        ]
        gates = torch.sigmoid(self.gate(out[0][..., 0])).view(n_atoms, LMAX, CH)
        return [F.silu(out[0])] + [out[l] * gates[:, l - 1, :, None] for l in range(1, LMAX + 1)]  # noqa: E741


class TFN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(8, CH)
        self.freq = nn.Parameter(torch.arange(1, N_BESSEL + 1) * math.pi / CUTOFF)
        self.convs = nn.ModuleList(Conv() for _ in range(LAYERS))
        self.readout = nn.Sequential(nn.Linear(CH, CH), nn.SiLU(), nn.Linear(CH, 1))

    def forward(self, species, pos, src, dst, shift, cell_of):
        vec = pos[src] - pos[dst] - shift
        d = vec.norm(dim=-1, keepdim=True)
        env = 0.5 * (torch.cos(math.pi * d / CUTOFF) + 1)
        rbf = torch.sin(self.freq * d) / d * env
        sh = real_sh(vec)
        n = pos.shape[0]
        h = [self.emb(species)[..., None]] + [pos.new_zeros(n, CH, 2 * l + 1) for l in range(1, LMAX + 1)]  # noqa: E741
        for conv in self.convs:
            h = conv(h, sh, rbf, src, dst, n)
        e_atom = self.readout(h[0][..., 0])[:, 0]
        return e_atom.new_zeros(CELLS).index_add_(0, cell_of, e_atom)


def neighbours(pos):
    p = pos.detach().view(CELLS, ATOMS, 3)
    diff = p[:, None, :, :] - p[:, :, None, :]  # (C, i, j, 3): pos[j] - pos[i]
    img = torch.round(diff / BOX)
    dist = (diff - BOX * img).norm(dim=-1)
    eye = torch.eye(ATOMS, dtype=torch.bool, device=pos.device)
    cell, i, j = ((dist < CUTOFF) & ~eye).nonzero(as_tuple=True)
    src, dst = cell * ATOMS + j, cell * ATOMS + i
    return src, dst, BOX * img[cell, i, j]


def make_cells():
    k = round(ATOMS ** (1 / 3))
    lattice = torch.stack(
        torch.meshgrid(*[torch.arange(k, device=device, dtype=torch.float64)] * 3, indexing="ij"), -1
    ).reshape(-1, 3)
    pos = (lattice[None] * BOX / k + 0.6 * (torch.rand(CELLS, ATOMS, 3, device=device) - 0.5)) % BOX
    species = torch.randint(0, 8, (CELLS * ATOMS,), device=device)
    cell_of = torch.arange(CELLS, device=device).repeat_interleave(ATOMS)
    return species, pos.reshape(-1, 3), cell_of


model = TFN().to(device)
opt = torch.optim.NAdam(model.parameters(), lr=5e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()} paths {len(PATHS)}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    species, pos, cell_of = make_cells()
    src, dst, shift = neighbours(pos)
    pos.requires_grad_()
    e_ref, f_ref = torch.randn(CELLS, device=device), torch.randn_like(pos)
    energy = model(species, pos, src, dst, shift, cell_of)
    forces = -torch.autograd.grad(energy.sum(), pos, create_graph=True)[0]
    loss = F.mse_loss(energy / ATOMS, e_ref) + F.mse_loss(forces, f_ref)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} edges {src.numel()} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del energy, forces, loss, pos

species, pos, cell_of = make_cells()
src, dst, shift = neighbours(pos)
for _ in range(4):
    pos = pos.detach().requires_grad_()
    energy = model(species, pos, src, dst, shift, cell_of)
    (grad,) = torch.autograd.grad(energy.sum(), pos)
    pos = ((pos - 0.01 * grad.clamp(-1, 1)) % BOX).detach()
if device == "cuda":
    print(
        f"relax energy {energy.sum().item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
