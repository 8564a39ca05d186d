"""An E(n)-equivariant graph network (EGNN) force field on batched molecules: 192 molecules of 12 to
40 atoms (sizes listed on the host), fully connected intra-molecular edges found on the GPU from a
padded meshgrid of arange indices masked by the molecule sizes (nonzero), 6 EGNN layers with 128
hidden features (edge MLPs on squared distances, index_add_ aggregation, coordinate updates),
energies pooled per molecule; two Adam steps on an energy plus force loss, forces as
-dE/dx by autograd.grad with create_graph=True; then forces for a fresh batch without a graph;
3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10006)
if SMALL:
    MOLS, LO, HI, HID, LAYERS = 4, 3, 7, 16, 2
else:
    MOLS, LO, HI, HID, LAYERS = 192, 12, 40, 128, 6
ELEMENTS = 10
device = "cuda" if torch.cuda.is_available() else "cpu"


class EGNNLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.edge = nn.Sequential(nn.Linear(2 * HID + 1, HID), nn.SiLU(), nn.Linear(HID, HID), nn.SiLU())
        self.coord = nn.Sequential(nn.Linear(HID, HID), nn.SiLU(), nn.Linear(HID, 1, bias=False))
        self.node = nn.Sequential(nn.Linear(2 * HID, HID), nn.SiLU(), nn.Linear(HID, HID))

    def forward(self, h, x, src, dst):
        rel = x[src] - x[dst]
        d2 = (rel**2).sum(-1, keepdim=True)
        m = self.edge(torch.cat([h[src], h[dst], d2], dim=-1))
        w = self.coord(m)
        x = x.index_add(0, dst, rel * w / (d2 + 1.0))
        agg = torch.zeros_like(h).index_add_(0, dst, m)
        return h + self.node(torch.cat([h, agg], dim=-1)), x


class EGNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(ELEMENTS, HID)
        self.layers = nn.ModuleList(EGNNLayer() for _ in range(LAYERS))
        self.readout = nn.Sequential(nn.Linear(HID, HID), nn.SiLU(), nn.Linear(HID, 1))

    def forward(self, z, pos, src, dst, mol, mols):
        h, x = self.embed(z), pos
        for layer in self.layers:
            h, x = layer(h, x, src, dst)
        atom_e = self.readout(h).squeeze(-1)
        return torch.zeros(mols, device=h.device).index_add_(0, mol, atom_e)


def make_batch(gen):
    sizes = torch.randint(LO, HI + 1, (MOLS,), generator=gen)
    n = int(sizes.sum())
    z = torch.randint(0, ELEMENTS, (n,), generator=gen)
    pos = torch.randn(n, 3, generator=gen) * 1.5
    mol = torch.repeat_interleave(torch.arange(MOLS), sizes)
    return sizes.to(device), z.to(device), pos.to(device), mol.to(device)


def edges(sizes):
    offsets = torch.cumsum(sizes, 0) - sizes
    i, j = torch.meshgrid(torch.arange(HI, device=device), torch.arange(HI, device=device), indexing="ij")
    valid = (i != j)[None] & (i[None] < sizes[:, None, None]) & (j[None] < sizes[:, None, None])
    g, a, b = valid.nonzero(as_tuple=True)
    return offsets[g] + a, offsets[g] + b


model = EGNN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-4)
gen = torch.Generator().manual_seed(11)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    sizes, z, pos, mol = make_batch(gen)
    src, dst = edges(sizes)
    pos.requires_grad_(True)
    energy = model(z, pos, src, dst, mol, MOLS)
    forces = -torch.autograd.grad(energy.sum(), pos, create_graph=True)[0]
    e_ref = torch.randn(MOLS, device=device)
    f_ref = torch.randn_like(forces)
    loss = (energy - e_ref).pow(2).mean() + 10.0 * (forces - f_ref).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} atoms {pos.shape[0]} edges {src.numel()} loss {loss.item():.3f}")
    if device == "cuda":
        print(
            f"train {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del sizes, z, pos, mol, src, dst, energy, forces, e_ref, f_ref, loss

sizes, z, pos, mol = make_batch(gen)
src, dst = edges(sizes)
pos.requires_grad_(True)
energy = model(z, pos, src, dst, mol, MOLS)
forces = -torch.autograd.grad(energy.sum(), pos)[0]
print(f"eval forces {tuple(forces.shape)} rms {forces.pow(2).mean().sqrt().item():.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
