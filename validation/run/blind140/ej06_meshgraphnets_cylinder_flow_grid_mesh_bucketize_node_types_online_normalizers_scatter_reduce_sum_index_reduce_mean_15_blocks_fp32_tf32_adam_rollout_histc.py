"""MeshGraphNets for the cylinder-flow task (Pfaff et al. 2021, written after the PyTorch ports of
deepmind-research/meshgraphnets): a 128 x 192 structured triangle mesh whose edges (horizontal,
vertical and diagonal, both directions) come from index arithmetic, node types (normal, obstacle,
inflow, outflow, wall) by `bucketize` of the distance to the cylinder and comparisons of the
coordinates, online normalisers that accumulate sums and squares of node, edge and output
features (the paper's Normalizer), an encoder of 2-layer MLPs with LayerNorm, 15 GraphNet blocks
(edge MLP over [edge, sender, receiver], node MLP over [node, the `scatter_reduce` "sum" of
incoming edges, their `index_reduce_` "mean"], residuals), a decoder to accelerations; training
noise on the normal nodes' velocities by `torch.where`, the MSE over normal and outflow nodes,
fp32 with TF32, Adam with ExponentialLR, 4 steps on one mesh a step (batch 1 as in the paper);
then a 5-step rollout under no_grad, the boundary velocities held by `where`, a `histc` of the
speed each step; 6 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14006)
NX, NY, LATENT, BLOCKS = (12, 16, 32, 3) if SMALL else (128, 192, 128, 15)
STEPS, ROLL = (2, 2) if SMALL else (4, 5)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
NORMAL, OBSTACLE, INFLOW, OUTFLOW, WALL, N_TYPES = 0, 4, 5, 6, 2, 9


def grid_mesh(nx, ny):
    ys, xs = torch.meshgrid(
        torch.linspace(0, 0.41, nx, device=device), torch.linspace(0, 1.6, ny, device=device), indexing="ij"
    )
    pos = torch.stack([xs.flatten(), ys.flatten()], dim=1)
    idx = torch.arange(nx * ny, device=device).view(nx, ny)
    pairs = [
        (idx[:, :-1].flatten(), idx[:, 1:].flatten()),
        (idx[:-1, :].flatten(), idx[1:, :].flatten()),
        (idx[:-1, :-1].flatten(), idx[1:, 1:].flatten()),
    ]
    s = torch.cat([p[0] for p in pairs])
    r = torch.cat([p[1] for p in pairs])
    senders, receivers = torch.cat([s, r]), torch.cat([r, s])
    dist = torch.linalg.vector_norm(pos - torch.tensor([0.2, 0.2], device=device), dim=1)
    node_type = torch.bucketize(dist, torch.tensor([0.05], device=device)).mul(NORMAL - OBSTACLE).add(OBSTACLE)
    node_type = torch.where(pos[:, 0] <= 0.0, INFLOW, node_type)
    node_type = torch.where(pos[:, 0] >= 1.6, OUTFLOW, node_type)
    node_type = torch.where((pos[:, 1] <= 0.0) | (pos[:, 1] >= 0.41), WALL, node_type)
    return pos, senders, receivers, node_type


class Normalizer(nn.Module):
    def __init__(self, size, max_accumulations=10**6, std_epsilon=1e-8):
        super().__init__()
        self._max_accumulations = max_accumulations
        self.register_buffer("_std_epsilon", torch.tensor(std_epsilon))
        self.register_buffer("_acc_count", torch.tensor(0.0))
        self.register_buffer("_num_accumulations", torch.tensor(0.0))
        self.register_buffer("_acc_sum", torch.zeros(1, size))
        self.register_buffer("_acc_sum_squared", torch.zeros(1, size))

    def forward(self, batched_data, accumulate=True):
        if accumulate and self._num_accumulations < self._max_accumulations:
            self._acc_sum += batched_data.sum(0, keepdim=True)
            self._acc_sum_squared += (batched_data**2).sum(0, keepdim=True)
            self._acc_count += batched_data.shape[0]
            self._num_accumulations += 1.0
        return (batched_data - self._mean()) / self._std_with_epsilon()

    def inverse(self, normalized_batch_data):
        return normalized_batch_data * self._std_with_epsilon() + self._mean()

    def _mean(self):
        return self._acc_sum / torch.clamp(self._acc_count, min=1.0)

    def _std_with_epsilon(self):
        std = torch.sqrt(self._acc_sum_squared / torch.clamp(self._acc_count, min=1.0) - self._mean() ** 2)
        return torch.maximum(std, self._std_epsilon)


def mlp(in_size, latent, out_size, layer_norm=True):
    layers = [nn.Linear(in_size, latent), nn.ReLU(), nn.Linear(latent, out_size)]
    if layer_norm:
        layers.append(nn.LayerNorm(out_size))
    return nn.Sequential(*layers)


class GraphNetBlock(nn.Module):
    def __init__(self, latent):
        super().__init__()
        self.edge_mlp = mlp(3 * latent, latent, latent)
        self.node_mlp = mlp(3 * latent, latent, latent)

    def forward(self, v, e, senders, receivers):
        new_e = self.edge_mlp(torch.cat([e, v[senders], v[receivers]], dim=-1))
        index = receivers.unsqueeze(-1).expand(-1, new_e.shape[1])
        agg_sum = torch.zeros_like(v).scatter_reduce(0, index, new_e, reduce="sum", include_self=False)
        agg_mean = torch.zeros_like(v).index_reduce_(0, receivers, new_e, "mean", include_self=False)
        new_v = self.node_mlp(torch.cat([v, agg_sum, agg_mean], dim=-1))
        return v + new_v, e + new_e


class MeshGraphNet(nn.Module):
    def __init__(self, latent, blocks):
        super().__init__()
        self.node_norm = Normalizer(2 + N_TYPES)
        self.edge_norm = Normalizer(3)
        self.out_norm = Normalizer(2)
        self.node_enc = mlp(2 + N_TYPES, latent, latent)
        self.edge_enc = mlp(3, latent, latent)
        self.blocks = nn.ModuleList([GraphNetBlock(latent) for _ in range(blocks)])
        self.decoder = mlp(latent, latent, 2, layer_norm=False)

    def forward(self, velocity, node_type, pos, senders, receivers, accumulate):
        one_hot = nn.functional.one_hot(node_type, N_TYPES).float()
        node_feat = self.node_norm(torch.cat([velocity, one_hot], dim=-1), accumulate)
        rel = pos[senders] - pos[receivers]
        rel_norm = torch.linalg.vector_norm(rel, dim=-1, keepdim=True)
        edge_feat = self.edge_norm(torch.cat([rel, rel_norm], dim=-1), accumulate)
        v, e = self.node_enc(node_feat), self.edge_enc(edge_feat)
        for blk in self.blocks:
            v, e = blk(v, e, senders, receivers)
        return self.decoder(v)


pos, senders, receivers, node_type = grid_mesh(NX, NY)
model = MeshGraphNet(LATENT, BLOCKS).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.1 ** (1 / 5e6))
loss_mask = (node_type == NORMAL) | (node_type == OUTFLOW)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    velocity = torch.randn(NX * NY, 2, device=device)
    target_velocity = velocity + 0.01 * torch.randn_like(velocity)
    noise = torch.where((node_type == NORMAL).unsqueeze(-1), torch.randn_like(velocity) * 0.02, 0.0)
    noisy = velocity + noise
    pred = model(noisy, node_type, pos, senders, receivers, accumulate=True)
    target = model.out_norm(target_velocity - noisy, accumulate=True)
    err = ((pred - target) ** 2).sum(-1)
    loss = (err * loss_mask).sum() / loss_mask.sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del pred, target, err, loss, noise, noisy
model.eval()
hists = []
with torch.no_grad():
    velocity = torch.randn(NX * NY, 2, device=device)
    boundary = ((node_type == INFLOW) | (node_type == WALL) | (node_type == OBSTACLE)).unsqueeze(-1)
    for _t in range(ROLL):
        acc = model.out_norm.inverse(model(velocity, node_type, pos, senders, receivers, accumulate=False))
        velocity = torch.where(boundary, velocity, velocity + acc)
        hists.append(torch.histc(torch.linalg.vector_norm(velocity, dim=-1), bins=50, min=0.0, max=4.0))
    hist = torch.stack(hists)
if device == "cuda":
    print(
        f"rollout mass {hist.sum().item():.0f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
