"""A SchNet-style interatomic potential written by hand: 32-nearest neighbours from `cdist` + `topk`,
Gaussian radial bases, cosine cutoff, 3 continuous-filter interaction blocks (128 features); trained
on energies and forces (forces = -dE/dpos by `autograd.grad(create_graph=True)`, so the loss
backpropagates through a double backward), Adam, 32 molecules of 128 atoms, 2 steps; then 5
velocity-Verlet molecular-dynamics steps with forces from `autograd.grad`; fp32; 3 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8305)
B, N, K, FEAT, RBF = (2, 16, 4, 16, 8) if SMALL else (32, 128, 32, 128, 50)
CUTOFF = 5.0


class Interaction(nn.Module):
    def __init__(self):
        super().__init__()
        self.filt = nn.Sequential(nn.Linear(RBF, FEAT), nn.Softplus(), nn.Linear(FEAT, FEAT))
        self.lin_in = nn.Linear(FEAT, FEAT, bias=False)
        self.out = nn.Sequential(nn.Linear(FEAT, FEAT), nn.Softplus(), nn.Linear(FEAT, FEAT))

    def forward(self, h, rbf, fcut, idx):
        w = self.filt(rbf) * fcut.unsqueeze(-1)
        x = self.lin_in(h)
        xj = torch.gather(x.unsqueeze(1).expand(-1, N, -1, -1), 2, idx.unsqueeze(-1).expand(-1, -1, -1, FEAT))
        return h + self.out((xj * w).sum(2))


class SchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, FEAT)
        self.blocks = nn.ModuleList(Interaction() for _ in range(3))
        self.head = nn.Sequential(nn.Linear(FEAT, FEAT // 2), nn.Softplus(), nn.Linear(FEAT // 2, 1))
        self.register_buffer("centers", torch.linspace(0, CUTOFF, RBF))

    def forward(self, z, pos):
        with torch.no_grad():
            d0 = torch.cdist(pos, pos) + torch.eye(N, device=pos.device) * 1e6
            idx = d0.topk(K, dim=-1, largest=False).indices
        pj = torch.gather(pos.unsqueeze(1).expand(-1, N, -1, -1), 2, idx.unsqueeze(-1).expand(-1, -1, -1, 3))
        d = (pos.unsqueeze(2) - pj).pow(2).sum(-1).add(1e-9).sqrt()
        rbf = torch.exp(-10.0 * (d.unsqueeze(-1) - self.centers) ** 2)
        fcut = 0.5 * (torch.cos(d * math.pi / CUTOFF) + 1.0) * (d < CUTOFF)
        h = self.embed(z)
        for block in self.blocks:
            h = block(h, rbf, fcut, idx)
        return self.head(h).squeeze(-1).sum(-1)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = SchNet().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    z = torch.randint(0, 10, (B, N), device=device)
    pos = (torch.rand(B, N, 3, device=device) * 8.0).requires_grad_()
    e_ref, f_ref = torch.randn(B, device=device), torch.randn(B, N, 3, device=device)
    energy = model(z, pos)
    forces = -torch.autograd.grad(energy.sum(), pos, create_graph=True)[0]
    loss = F.mse_loss(energy, e_ref) + 10.0 * F.mse_loss(forces, f_ref)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del pos, energy, forces, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.requires_grad_(False)
pos = torch.rand(B, N, 3, device=device) * 8.0
vel = torch.zeros_like(pos)
z = torch.randint(0, 10, (B, N), device=device)
dt = 1e-3
for _ in range(5):
    p = pos.detach().requires_grad_()
    force = -torch.autograd.grad(model(z, p).sum(), p)[0]
    vel = vel + dt * force
    pos = pos + dt * vel
if device == "cuda":
    print(f"md peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
