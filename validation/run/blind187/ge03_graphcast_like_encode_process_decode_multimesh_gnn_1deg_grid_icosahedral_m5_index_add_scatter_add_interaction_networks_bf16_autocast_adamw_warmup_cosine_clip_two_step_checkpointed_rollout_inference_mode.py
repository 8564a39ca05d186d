"""A GraphCast-like encode-process-decode graph network written by hand (after the paper and
google-deepmind/graphcast's deep_typed_graph_net, as plain PyTorch): a 1-degree lat-lon grid of
181 x 360 = 65,160 nodes carrying 2 input times of 83 variables (6 upper-air variables on 13 pressure
levels plus 5 surface variables) with 5 forcing and 5 static fields (176 features), and an icosahedral
multi-mesh refined 5 times (10,242 nodes; the edges of all 6 refinement levels, 81,920 directed edges).
Grid2Mesh edges join each grid node to its nearest mesh node plus a fifth of them to a second one
(78,192 edges), Mesh2Grid edges join every grid node to 3 mesh nodes (195,480 edges); edge features are
the length and the 3-D displacement. Every node / edge set is embedded by an MLP (Linear, SiLU,
Linear, LayerNorm) to a latent of 512; each interaction network updates edges with an MLP of
[edge, sender, receiver] (gathered by indexing) plus a residual and nodes with an MLP of [node,
summed incoming edges] plus a residual, the sums made by index_add_ into zeros (Grid2Mesh and the
processor) and by scatter_add_ with expanded indices (Mesh2Grid). 12 processor layers on the
multi-mesh; the decoder's output MLP (no LayerNorm) predicts the 83-variable residual added to the
last input state.

Training under bf16 autocast with AdamW (foreach, lr 1e-3, betas (0.9, 0.95), weight decay 0.1), a
linear warm-up then cosine LambdaLR, gradient clipping at 32, loss the MSE weighted by cos(latitude)
and by pressure level (normalised). Phases: the first step; 2 more steps; 2 optimizer steps of
2-step autoregressive training (the first prediction fed back with the next forcings) with every
processor layer under torch.utils.checkpoint (use_reentrant=False); a 4-step forecast under
torch.inference_mode with bf16 autocast, the predictions moved to the host. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18703)
if SMALL:
    NLAT, NLON, MESH_NODES, MESH_EDGES, LATENT, LAYERS, STEPS, ROLL = 19, 36, 162, 1280, 32, 2, 1, 2
else:
    NLAT, NLON, MESH_NODES, MESH_EDGES, LATENT, LAYERS, STEPS, ROLL = 181, 360, 10242, 81920, 512, 12, 2, 4
LEVELS, UPPER_VARS, SURF_VARS, FORCING, STATIC = 13, 6, 5, 5, 5
N_VARS = UPPER_VARS * LEVELS + SURF_VARS
IN_FEATS = 2 * N_VARS + FORCING + STATIC
G = NLAT * NLON
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def mlp(din, dout, norm=True):
    layers = [nn.Linear(din, LATENT), nn.SiLU(), nn.Linear(LATENT, dout)]
    if norm:
        layers.append(nn.LayerNorm(dout))
    return nn.Sequential(*layers)


class InteractionNetwork(nn.Module):
    def __init__(self, scatter="index_add", update_senders=False):
        super().__init__()
        self.edge_mlp = mlp(3 * LATENT, LATENT)
        self.node_mlp = mlp(2 * LATENT, LATENT)
        self.sender_mlp = mlp(LATENT, LATENT) if update_senders else None
        self.scatter = scatter

    def forward(self, senders, receivers, v_s, v_r, e):
        e_new = self.edge_mlp(torch.cat([e, v_s[senders], v_r[receivers]], dim=-1))
        if self.scatter == "index_add":
            agg = torch.zeros(v_r.shape[0], e_new.shape[-1], dtype=e_new.dtype, device=e_new.device)
            agg.index_add_(0, receivers, e_new)
        else:
            agg = torch.zeros(v_r.shape[0], e_new.shape[-1], dtype=e_new.dtype, device=e_new.device)
            agg.scatter_add_(0, receivers[:, None].expand(-1, e_new.shape[-1]), e_new)
        v_r_new = v_r + self.node_mlp(torch.cat([v_r, agg.to(v_r.dtype)], dim=-1))
        v_s_new = v_s + self.sender_mlp(v_s) if self.sender_mlp is not None else v_s
        return v_s_new, v_r_new, e + e_new


class GraphCastLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.grid_embed = mlp(IN_FEATS, LATENT)
        self.mesh_embed = mlp(3, LATENT)
        self.g2m_edge_embed = mlp(4, LATENT)
        self.mesh_edge_embed = mlp(4, LATENT)
        self.m2g_edge_embed = mlp(4, LATENT)
        self.encoder = InteractionNetwork(update_senders=True)
        self.processor = nn.ModuleList([InteractionNetwork() for _ in range(LAYERS)])
        self.decoder = InteractionNetwork(scatter="scatter_add")
        self.out = mlp(LATENT, N_VARS, norm=False)
        self.use_checkpoint = False

    def forward(self, grid_in, graph):
        vg = self.grid_embed(grid_in)
        vm = self.mesh_embed(graph["mesh_pos"])
        e_g2m = self.g2m_edge_embed(graph["g2m_feat"])
        e_mesh = self.mesh_edge_embed(graph["mesh_feat"])
        e_m2g = self.m2g_edge_embed(graph["m2g_feat"])
        vg, vm, _ = self.encoder(graph["g2m_s"], graph["g2m_r"], vg, vm, e_g2m)
        for layer in self.processor:
            if self.use_checkpoint and self.training:
                _, vm, e_mesh = checkpoint(
                    layer, graph["mesh_s"], graph["mesh_r"], vm, vm, e_mesh, use_reentrant=False
                )
            else:
                _, vm, e_mesh = layer(graph["mesh_s"], graph["mesh_r"], vm, vm, e_mesh)
        _, vg, _ = self.decoder(graph["m2g_s"], graph["m2g_r"], vm, vg, e_m2g)
        return self.out(vg)


def build_graph():
    g2m_s = torch.cat([torch.arange(G), torch.randperm(G)[: G // 5]]).to(device)
    g2m_r = torch.randint(0, MESH_NODES, (g2m_s.numel(),), device=device)
    mesh_s = torch.randint(0, MESH_NODES, (MESH_EDGES,), device=device)
    mesh_r = torch.randint(0, MESH_NODES, (MESH_EDGES,), device=device)
    m2g_s = torch.randint(0, MESH_NODES, (3 * G,), device=device)
    m2g_r = torch.arange(G, device=device).repeat_interleave(3)
    mesh_pos = F.normalize(torch.randn(MESH_NODES, 3, device=device), dim=-1)
    return {
        "g2m_s": g2m_s,
        "g2m_r": g2m_r,
        "mesh_s": mesh_s,
        "mesh_r": mesh_r,
        "m2g_s": m2g_s,
        "m2g_r": m2g_r,
        "mesh_pos": mesh_pos,
        "g2m_feat": torch.randn(g2m_s.numel(), 4, device=device),
        "mesh_feat": torch.randn(MESH_EDGES, 4, device=device),
        "m2g_feat": torch.randn(3 * G, 4, device=device),
    }


graph = build_graph()
lat = torch.linspace(-90, 90, NLAT, device=device)
lat_w = torch.cos(torch.deg2rad(lat)).clamp_min(1e-3)
lat_w = (lat_w / lat_w.mean()).repeat_interleave(NLON)[:, None]
levels = torch.tensor([50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000.0], device=device)
var_w = torch.cat([(levels / levels.mean()).repeat(UPPER_VARS), torch.ones(SURF_VARS, device=device)])

model = GraphCastLike().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
WARMUP, TOTAL = 1000, 300000
sched = torch.optim.lr_scheduler.LambdaLR(
    opt,
    lambda s: (
        (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))
    ),
)


def weighted_mse(pred, target):
    return ((pred.float() - target) ** 2 * lat_w * var_w).mean()


def forcings():
    return torch.randn(G, FORCING + STATIC, device=device)


def forward_step(prev, cur, forcing):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        delta = model(torch.cat([prev, cur, forcing], dim=-1), graph)
    return cur + delta.float()


def optimize(loss):
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 32.0)
    opt.step()
    sched.step()
    return gn


model.train()
for step in range(STEPS + 1):
    prev, cur, target = (torch.randn(G, N_VARS, device=device) for _ in range(3))
    loss = weighted_mse(forward_step(prev, cur, forcings()), target)
    gn = optimize(loss)
    print(f"step {step} loss {loss.item():.4f} grad norm {gn.item():.3f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.use_checkpoint = True
for step in range(2):
    prev, cur, t1, t2 = (torch.randn(G, N_VARS, device=device) for _ in range(4))
    p1 = forward_step(prev, cur, forcings())
    p2 = forward_step(cur, p1, forcings())
    loss = 0.5 * (weighted_mse(p1, t1) + weighted_mse(p2, t2))
    gn = optimize(loss)
    print(f"2-step rollout step {step} loss {loss.item():.4f} grad norm {gn.item():.3f}")
if device == "cuda":
    print(
        f"rollout training peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.eval()
preds = []
with torch.inference_mode():
    prev, cur = torch.randn(G, N_VARS, device=device), torch.randn(G, N_VARS, device=device)
    for _ in range(ROLL):
        nxt = forward_step(prev, cur, forcings())
        preds.append(nxt.view(NLAT, NLON, N_VARS).cpu())
        prev, cur = cur, nxt
print(f"forecast {len(preds)} steps, last t850 mean {preds[-1][..., 10].mean().item():.4f}")
if device == "cuda":
    print(f"forecast peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
