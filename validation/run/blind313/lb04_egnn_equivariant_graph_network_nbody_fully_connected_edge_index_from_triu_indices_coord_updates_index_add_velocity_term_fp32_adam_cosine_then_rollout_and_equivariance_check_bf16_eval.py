"""E(n) equivariant graph neural network (Satorras, Hoogeboom and Welling 2021) written by hand for the
paper's N-body experiment: every system of 5 charged particles is a fully connected graph whose edge
index is built once from torch.triu_indices (both directions) and offset per system, batched into one
big graph. Each EGCL layer computes edge messages from (h_i, h_j, |x_i - x_j|^2, edge attributes),
aggregates them with index_add_, updates coordinates with (x_i - x_j) * phi_x(m_ij) averaged by a
degree count, and carries a velocity term phi_v(h) * v. Training in fp32 with Adam and a cosine
schedule on synthetic spring-like trajectories.

Phases: 0 graph indices and model built; 1 training steps on batches of 4096 systems; 2 a 10-step
autoregressive rollout under no_grad; 3 the equivariance check: a random rotation and translation of the
inputs against the rotated outputs, and a bf16 autocast evaluation of 16384 systems."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3)
device = "cuda"


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


N_PART = 5


def batch_edges(n_sys):
    iu = torch.triu_indices(N_PART, N_PART, 1, device=device)
    e = torch.cat([iu, iu.flip(0)], 1)  # 2, 20
    off = (torch.arange(n_sys, device=device) * N_PART).repeat_interleave(e.shape[1])
    return e.repeat(1, n_sys) + off


class EGCL(nn.Module):
    def __init__(self, h, edge_attr=2):
        super().__init__()
        self.phi_e = nn.Sequential(nn.Linear(2 * h + 1 + edge_attr, h), nn.SiLU(), nn.Linear(h, h), nn.SiLU())
        self.phi_x = nn.Sequential(nn.Linear(h, h), nn.SiLU(), nn.Linear(h, 1, bias=False))
        self.phi_h = nn.Sequential(nn.Linear(2 * h, h), nn.SiLU(), nn.Linear(h, h))
        self.phi_v = nn.Sequential(nn.Linear(h, h), nn.SiLU(), nn.Linear(h, 1))
        nn.init.xavier_uniform_(self.phi_x[2].weight, gain=0.001)

    def forward(self, h, x, v, edges, eattr):
        row, col = edges
        diff = x[row] - x[col]
        d2 = (diff**2).sum(-1, keepdim=True)
        m = self.phi_e(torch.cat([h[row], h[col], d2, eattr], -1))
        trans = diff * self.phi_x(m)
        agg_x = torch.zeros_like(x).index_add_(0, row, trans.to(x.dtype)) / (N_PART - 1)
        v = self.phi_v(h) * v + agg_x
        x = x + v
        agg_h = torch.zeros_like(h).index_add_(0, row, m.to(h.dtype))
        h = h + self.phi_h(torch.cat([h, agg_h], -1))
        return h, x, v


class EGNN(nn.Module):
    def __init__(self, hidden=128, layers=4):
        super().__init__()
        self.embed = nn.Linear(1, hidden)
        self.layers = nn.ModuleList(EGCL(hidden) for _ in range(layers))

    def forward(self, x, v, charges, edges):
        row, col = edges
        eattr = torch.cat([charges[row] * charges[col], ((x[row] - x[col]) ** 2).sum(-1, keepdim=True)], -1)
        h = self.embed(v.norm(dim=-1, keepdim=True))
        for layer in self.layers:
            h, x, v = layer(h, x, v, edges, eattr)
        return x


def simulate(x, v, charges, edges, steps=10, dt=0.01):
    row, col = edges
    for _ in range(steps):
        diff = x[row] - x[col]
        f = charges[row] * charges[col] * diff / ((diff**2).sum(-1, keepdim=True) + 0.1) ** 1.5
        acc = torch.zeros_like(x).index_add_(0, row, f)
        v = v + dt * acc
        x = x + dt * v
    return x, v


def sample(n_sys):
    x = torch.randn(n_sys * N_PART, 3, device=device)
    v = torch.randn(n_sys * N_PART, 3, device=device) * 0.5
    q = torch.randint(0, 2, (n_sys * N_PART, 1), device=device).float() * 2 - 1
    return x, v, q


model = EGNN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-4, weight_decay=1e-12)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
edges = batch_edges(4096)
report("phase0 build")

for step in range(20):
    x, v, q = sample(4096)
    with torch.no_grad():
        target, _ = simulate(x, v, q, edges, steps=100)
    pred = model(x, v, q, edges)
    loss = F.mse_loss(pred, target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
print("train mse", loss.item())
report("phase1 train")

model.eval()
with torch.no_grad():
    x, v, q = sample(4096)
    traj = [x]
    for _ in range(10):
        nx = model(x, v, q, edges)
        v, x = nx - x, nx
        traj.append(x)
    traj = torch.stack(traj)
print("rollout spread", traj.std().item())
report("phase2 rollout")

with torch.no_grad():
    x, v, q = sample(4096)
    Q, _ = torch.linalg.qr(torch.randn(3, 3, device=device))
    t = torch.randn(1, 3, device=device)
    out_rot = model(x @ Q.T + t, v @ Q.T, q, edges)
    rot_out = model(x, v, q, edges) @ Q.T + t
    print("equivariance error", (out_rot - rot_out).abs().max().item())
    big_edges = batch_edges(16384)
    xb, vb, qb = sample(16384)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        pb = model(xb, vb, qb, big_edges)
    print("bf16 eval", pb.dtype, pb.float().abs().mean().item())
report("phase3 equivariance and bf16")
