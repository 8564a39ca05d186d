"""MeshGraphNets (cylinder flow) written from the paper: a triangulated 2-D mesh built from a grid of
`arange` indices, its edges taken from the triangles both ways (min and max of each pair,
`unique(dim=0)`), node features of velocity and a one-hot node type, edge features of relative mesh
position and its norm; encode-process-decode with LayerNorm MLPs of 128 and 15 message-passing steps
(edge update on sender and receiver, receivers summed by `index_add_`, residuals); online
normalisers accumulating statistics in buffers; training noise injection on the velocities,
next-step acceleration loss on the normal nodes; 4 meshes in one batch, bf16 autocast, Adam with an
exponential LR decay, 3 training steps, then a 12-step rollout under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12502)
GH, GW, MESHES = (12, 24, 2) if SMALL else (96, 192, 4)
LATENT, STEPS_MP = (32, 3) if SMALL else (128, 15)
N_TYPES = 9
device = "cuda" if torch.cuda.is_available() else "cpu"


def mlp(d_in, d_out, norm=True):
    layers = [
        nn.Linear(d_in, LATENT),
        nn.ReLU(),
        nn.Linear(LATENT, LATENT),
        nn.ReLU(),
        nn.Linear(LATENT, d_out),
    ]
    if norm:
        layers.append(nn.LayerNorm(d_out))
    return nn.Sequential(*layers)


class Normalizer(nn.Module):
    def __init__(self, size, max_acc=10**6):
        super().__init__()
        self.max_acc = max_acc
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("sum", torch.zeros(size))
        self.register_buffer("sum_sq", torch.zeros(size))

    def forward(self, x, accumulate):
        if accumulate and self.count < self.max_acc:
            self.count += x.shape[0]
            self.sum += x.detach().sum(0)
            self.sum_sq += (x.detach() ** 2).sum(0)
        n = self.count.clamp(min=1)
        mean = self.sum / n
        std = (self.sum_sq / n - mean**2).clamp(min=1e-8).sqrt()
        return (x - mean) / std

    def inverse(self, x):
        n = self.count.clamp(min=1)
        mean = self.sum / n
        return x * (self.sum_sq / n - mean**2).clamp(min=1e-8).sqrt() + mean


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.edge = mlp(3 * LATENT, LATENT)
        self.node = mlp(2 * LATENT, LATENT)

    def forward(self, x, e, senders, receivers):
        e_new = self.edge(torch.cat([e, x[senders], x[receivers]], -1))
        agg = torch.zeros(x.shape[0], e_new.shape[1], dtype=e_new.dtype, device=x.device)
        agg.index_add_(0, receivers, e_new)
        x_new = self.node(torch.cat([x, agg], -1))
        return x + x_new, e + e_new


class MeshGraphNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.node_norm = Normalizer(2 + N_TYPES)
        self.edge_norm = Normalizer(3)
        self.out_norm = Normalizer(2)
        self.node_enc = mlp(2 + N_TYPES, LATENT)
        self.edge_enc = mlp(3, LATENT)
        self.blocks = nn.ModuleList(Block() for _ in range(STEPS_MP))
        self.dec = mlp(LATENT, 2, norm=False)

    def forward(self, vel, node_type, mesh_pos, senders, receivers, accumulate):
        nodes = torch.cat([vel, F.one_hot(node_type, N_TYPES).float()], -1)
        rel = mesh_pos[senders] - mesh_pos[receivers]
        edges = torch.cat([rel, rel.norm(dim=-1, keepdim=True)], -1)
        x = self.node_enc(self.node_norm(nodes, accumulate))
        e = self.edge_enc(self.edge_norm(edges, accumulate))
        for blk in self.blocks:
            x, e = blk(x, e, senders, receivers)
        return self.dec(x)


def build_mesh():
    idx = torch.arange(GH * GW, device=device).reshape(GH, GW)
    a, b, c, d = idx[:-1, :-1], idx[:-1, 1:], idx[1:, :-1], idx[1:, 1:]
    faces = torch.cat([torch.stack([a, b, c], -1).reshape(-1, 3), torch.stack([b, d, c], -1).reshape(-1, 3)])
    edges = torch.cat([faces[:, 0:2], faces[:, 1:3], torch.stack([faces[:, 2], faces[:, 0]], 1)])
    lo, _ = torch.min(edges, dim=1)
    hi, _ = torch.max(edges, dim=1)
    s, r = torch.unique(torch.stack([hi, lo], 1), dim=0).unbind(1)
    senders, receivers = torch.cat([s, r]), torch.cat([r, s])
    ys, xs = torch.meshgrid(
        torch.linspace(0, 0.41, GH, device=device), torch.linspace(0, 1.6, GW, device=device), indexing="ij"
    )
    mesh_pos = torch.stack([xs, ys], -1).reshape(-1, 2)
    node_type = torch.zeros(GH, GW, dtype=torch.long, device=device)
    node_type[0], node_type[-1], node_type[:, 0], node_type[:, -1] = 6, 6, 4, 5
    n = GH * GW
    offs = torch.arange(MESHES, device=device) * n
    senders = (senders[None] + offs[:, None]).reshape(-1)
    receivers = (receivers[None] + offs[:, None]).reshape(-1)
    return mesh_pos.repeat(MESHES, 1), node_type.reshape(-1).repeat(MESHES), senders, receivers


mesh_pos, node_type, senders, receivers = build_mesh()
normal = node_type == 0
model = MeshGraphNet().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9999)
if device == "cuda":
    print(
        f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        f" nodes {mesh_pos.shape[0]} edges {senders.numel()}"
    )
    torch.cuda.reset_peak_memory_stats()

traj = torch.randn(3 + 2, mesh_pos.shape[0], 2, device=device)
for step in range(3):
    vel, target_vel = traj[step], traj[step + 1]
    noise = torch.randn_like(vel) * 0.02
    noise[~normal] = 0
    noisy = vel + noise
    with torch.autocast("cuda", dtype=torch.bfloat16):
        pred = model(noisy, node_type, mesh_pos, senders, receivers, accumulate=True)
    target = model.out_norm(target_vel - noisy, accumulate=True)
    err = ((pred.float() - target) ** 2).sum(-1)
    loss = err[normal].mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del pred, target, err, loss, noise, noisy

model.eval()
vel = traj[0].clone()
frames = []
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(12):
        acc = model.out_norm.inverse(
            model(vel, node_type, mesh_pos, senders, receivers, accumulate=False).float()
        )
        vel = torch.where(normal[:, None], vel + acc, vel)
        frames.append(vel)
rollout = torch.stack(frames)
if device == "cuda":
    print(
        f"rollout {tuple(rollout.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
