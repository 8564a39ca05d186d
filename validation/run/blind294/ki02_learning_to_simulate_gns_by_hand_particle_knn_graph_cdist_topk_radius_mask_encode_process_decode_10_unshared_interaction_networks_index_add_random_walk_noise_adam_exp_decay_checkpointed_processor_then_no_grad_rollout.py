"""Graph Network-based Simulator (Sanchez-Gonzalez et al. 2020, "Learning to Simulate Complex Physics with
Graph Networks") written by hand for 2-D particles, as its reference code does but in plain PyTorch.
Synthetic "WaterDrop-like" trajectories made on the host (seeded): 2,048 particles per scene, gravity,
damping and inelastic box walls, 3 particle types. Per step the model sees the last 6 positions: 5
velocities normalised by dataset statistics, the clipped distances to the 4 walls over the connectivity
radius and a learned 16-d type embedding. The graph is rebuilt every step per scene: `torch.cdist` over
the scene's particles, the 16 nearest (`topk(largest=False)`, self excluded) kept as static-shape edges,
weighted by a radius mask (distance < R), senders/receivers offset per scene; edge features are the
relative displacement over R and its norm. Encode-process-decode: MLPs of 2 hidden layers of 128 with a
LayerNorm (not on the decoder), 10 unshared InteractionNetwork steps (edge MLP on [e, v_s, v_r], messages
summed onto receivers with `index_add_`, node MLP on [v, agg], both residual), the decoder predicts the
normalised acceleration. Training injects the paper's random-walk noise (std 6.7e-4 over the 5
velocities, `cumsum`) into the input positions and regresses the acceleration the noisy history implies
(MSE), Adam lr 1e-4 decayed exponentially.
Phase 1: 12 steps at 4 scenes (8,192 particles, 131,072 edges).
Phase 2: 8 steps at 8 scenes with each processor step under `torch.utils.checkpoint(use_reentrant=False)`.
Phase 3: a no_grad rollout of 60 steps of 2 scenes, positions clamped to the box, the graph rebuilt each step.
3 phases."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2942)
dev = "cuda"
P, K, R, HIST, LATENT, MP_STEPS, NOISE = 2048, 16, 0.015, 6, 128, 10, 6.7e-4
BOX = (0.1, 0.9)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


# --- synthetic trajectories on the host ------------------------------------------------------------------
def make_scene(frames=120):
    pos = torch.rand(P, 2) * 0.4 + torch.tensor([0.2, 0.45])
    vel = torch.randn(P, 2) * 2e-3
    out = [pos]
    for _ in range(frames - 1):
        vel = vel * 0.995 + torch.tensor([0.0, -1e-4])
        pos = pos + vel
        low, high = pos < BOX[0], pos > BOX[1]
        vel = torch.where(low | high, -0.5 * vel, vel)
        pos = pos.clamp(*BOX)
        out.append(pos)
    return torch.stack(out)  # (frames, P, 2)


scenes = torch.stack([make_scene() for _ in range(16)])  # (16, frames, P, 2)
types = torch.randint(0, 3, (16, P))
vels = scenes[:, 1:] - scenes[:, :-1]
accs = vels[:, 1:] - vels[:, :-1]
vel_mean, vel_std = vels.mean((0, 1, 2)), vels.std((0, 1, 2))
acc_mean, acc_std = accs.mean((0, 1, 2)), accs.std((0, 1, 2))
scenes, types = scenes.to(dev), types.to(dev)
vel_mean, vel_std, acc_mean, acc_std = (t.to(dev) for t in (vel_mean, vel_std, acc_mean, acc_std))
box_lo = torch.tensor(BOX[0], device=dev)
box_hi = torch.tensor(BOX[1], device=dev)


def mlp(d_in, d_out, layer_norm=True):
    layers = [
        nn.Linear(d_in, LATENT),
        nn.ReLU(),
        nn.Linear(LATENT, LATENT),
        nn.ReLU(),
        nn.Linear(LATENT, d_out),
    ]
    if layer_norm:
        layers.append(nn.LayerNorm(d_out))
    return nn.Sequential(*layers)


class InteractionNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.edge_fn = mlp(3 * LATENT, LATENT)
        self.node_fn = mlp(2 * LATENT, LATENT)

    def forward(self, v, e, senders, receivers, mask):
        e_new = self.edge_fn(torch.cat([e, v[senders], v[receivers]], -1)) * mask
        agg = torch.zeros_like(v).index_add_(0, receivers, e_new)
        v_new = self.node_fn(torch.cat([v, agg], -1))
        return v + v_new, e + e_new


class GNS(nn.Module):
    def __init__(self):
        super().__init__()
        self.type_emb = nn.Embedding(3, 16)
        self.node_enc = mlp((HIST - 1) * 2 + 4 + 16, LATENT)
        self.edge_enc = mlp(3, LATENT)
        self.processor = nn.ModuleList(InteractionNetwork() for _ in range(MP_STEPS))
        self.decoder = mlp(LATENT, 2, layer_norm=False)
        self.use_checkpoint = False

    def forward(self, pos_hist, ptype):
        # pos_hist (S, HIST, P, 2), ptype (S, P)
        s = pos_hist.shape[0]
        cur = pos_hist[:, -1]  # (S, P, 2)
        vel = (pos_hist[:, 1:] - pos_hist[:, :-1] - vel_mean) / vel_std  # (S, HIST-1, P, 2)
        vel = vel.permute(0, 2, 1, 3).reshape(s * P, -1)
        walls = torch.cat([cur - box_lo, box_hi - cur], -1).reshape(s * P, 4)
        walls = (walls / R).clamp(-1.0, 1.0)
        nodes = torch.cat([vel, walls, self.type_emb(ptype.reshape(-1))], -1)

        d = torch.cdist(cur, cur)  # (S, P, P)
        dist, nbr = d.topk(K + 1, dim=-1, largest=False)
        dist, nbr = dist[..., 1:], nbr[..., 1:]  # drop self
        offset = (torch.arange(s, device=dev) * P).view(s, 1, 1)
        senders = (nbr + offset).reshape(-1)
        receivers = (torch.arange(P, device=dev).view(1, P, 1) + offset).expand(s, P, K).reshape(-1)
        mask = (dist < R).float().reshape(-1, 1)
        flat = cur.reshape(s * P, 2)
        rel = (flat[senders] - flat[receivers]) / R
        edges = torch.cat([rel, rel.norm(dim=-1, keepdim=True)], -1)

        v, e = self.node_enc(nodes), self.edge_enc(edges)
        for block in self.processor:
            if self.use_checkpoint:
                v, e = checkpoint(block, v, e, senders, receivers, mask, use_reentrant=False)
            else:
                v, e = block(v, e, senders, receivers, mask)
        return self.decoder(v).view(s, P, 2)


def random_walk_noise(pos_hist):
    vel_noise = torch.randn_like(pos_hist[:, 1:]) * (NOISE / (HIST - 1) ** 0.5)
    vel_noise = vel_noise.cumsum(1)
    pos_noise = torch.cat([torch.zeros_like(vel_noise[:, :1]), vel_noise.cumsum(1)], 1)
    return pos_noise


def train_step(n_scenes):
    idx = torch.randint(0, scenes.shape[0], (n_scenes,))
    t0 = torch.randint(0, scenes.shape[1] - HIST - 1, (1,)).item()
    window = scenes[idx, t0 : t0 + HIST + 1]  # (S, HIST+1, P, 2)
    noise = random_walk_noise(window[:, :HIST])
    hist = window[:, :HIST] + noise
    target_pos = window[:, HIST] + noise[:, -1]
    target_acc = target_pos - 2 * hist[:, -1] + hist[:, -2]
    target_acc = (target_acc - acc_mean) / acc_std
    pred = model(hist, types[idx])
    loss = F.mse_loss(pred, target_acc)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    return loss


model = GNS().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.999)
print("parameters", sum(p.numel() for p in model.parameters()))
for _ in range(12):
    loss = train_step(4)
print("train loss", round(loss.item(), 5))
report("train_gns_4_scenes_131k_edges")

model.use_checkpoint = True
for _ in range(8):
    loss = train_step(8)
print("checkpointed train loss", round(loss.item(), 5))
report("train_gns_8_scenes_checkpointed_processor")

del loss
model.eval()
model.use_checkpoint = False
with torch.no_grad():
    hist = scenes[:2, :HIST].clone()
    ptype = types[:2]
    traj = [hist[:, -1]]
    for _ in range(60):
        acc = model(hist, ptype) * acc_std + acc_mean
        nxt = (2 * hist[:, -1] - hist[:, -2] + acc).clamp(*BOX)
        hist = torch.cat([hist[:, 1:], nxt[:, None]], 1)
        traj.append(nxt)
    traj = torch.stack(traj, 1)
    mse = F.mse_loss(traj[:, 1:], scenes[:2, HIST : HIST + 60])
print("rollout position mse", f"{mse.item():.3e}")
report("no_grad_rollout_60_steps_2_scenes")
