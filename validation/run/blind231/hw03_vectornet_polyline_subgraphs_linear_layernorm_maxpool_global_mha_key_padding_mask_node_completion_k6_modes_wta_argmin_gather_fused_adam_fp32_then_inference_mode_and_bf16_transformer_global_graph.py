"""VectorNet (Gao et al. 2020) for multi-modal trajectory forecasting, written by hand.

Each scene has A=32 agent polylines of 19 vectors and L=384 lane polylines of 19 vectors, 8 features per
vector (start xy, end xy, type, timestamp/lane id), with fixed random valid lengths (CPU-drawn masks, so
shapes never follow data). Polyline subgraphs: 3 layers of Linear + LayerNorm + ReLU (64 channels),
each followed by a max-pool over the polyline's valid vectors (masked_fill) concatenated back to every
vector (128 channels); the polyline feature is the final max-pool, L2-normalised. Global interaction
graph: one nn.MultiheadAttention (d 128, 1 head as in the paper, then 4 heads) over the A + L polylines
with a key_padding_mask for absent polylines. Auxiliary node completion: 10% of polyline features
(fixed random ids) are zeroed before the global graph and reconstructed from its output (smooth L1).
The decoder predicts K=6 modes x 30 steps x 2 and mode logits for the focal agent; loss is
winner-takes-all: ADE per mode, argmin over modes, gather of the best trajectory, smooth L1 to the ground
truth, and cross-entropy on the mode logits against the argmin.

Phases: 5 fp32 steps of fused Adam with a StepLR at batch 128; an inference_mode evaluation at batch
256 (need_weights=False, minADE / minFDE over the 6 modes); a second global graph of 3
nn.TransformerEncoderLayer (batch_first, norm_first, 4 heads) with src_key_padding_mask trained for 3
steps under bf16 autocast with foreach AdamW at batch 128; torch.cuda.empty_cache() and an
inference_mode pass of the whole model cast to bfloat16 at batch 512. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2313)
device = "cuda"
A, L, V, FEAT = 32, 384, 19, 8
T, K, H = 30, 6, 64


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class SubGraphLayer(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.fc = nn.Linear(cin, H)
        self.norm = nn.LayerNorm(H)

    def forward(self, x, vmask):  # x [N, V, cin], vmask [N, V] True = valid
        x = F.relu(self.norm(self.fc(x)))
        pooled = x.masked_fill(~vmask.unsqueeze(-1), -1e4).max(dim=1, keepdim=True)[0]
        return torch.cat([x, pooled.expand(-1, x.shape[1], -1)], dim=-1)


class SubGraph(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([SubGraphLayer(FEAT), SubGraphLayer(2 * H), SubGraphLayer(2 * H)])

    def forward(self, x, vmask):
        for layer in self.layers:
            x = layer(x, vmask)
        x = x.masked_fill(~vmask.unsqueeze(-1), -1e4).max(dim=1)[0]
        return F.normalize(x, dim=-1)


class VectorNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.agent_sub = SubGraph()
        self.lane_sub = SubGraph()
        self.global_attn = nn.MultiheadAttention(2 * H, 4, batch_first=True)
        self.global_tf = None
        self.complete = nn.Sequential(nn.Linear(2 * H, 2 * H), nn.LayerNorm(2 * H), nn.ReLU(), nn.Linear(2 * H, 2 * H))
        self.traj = nn.Sequential(nn.Linear(2 * H, 256), nn.LayerNorm(256), nn.ReLU(), nn.Linear(256, K * T * 2))
        self.score = nn.Sequential(nn.Linear(2 * H, 64), nn.ReLU(), nn.Linear(64, K))

    def forward(self, agents, amask, lanes, lmask, pmask, drop=None, need_weights=True):
        bsz = agents.shape[0]
        fa = self.agent_sub(agents.flatten(0, 1), amask.flatten(0, 1)).view(bsz, A, -1)
        fl = self.lane_sub(lanes.flatten(0, 1), lmask.flatten(0, 1)).view(bsz, L, -1)
        nodes = torch.cat([fa, fl], dim=1)
        target = None
        if drop is not None:
            target = nodes.detach().gather(1, drop.unsqueeze(-1).expand(-1, -1, nodes.shape[-1]))
            keep = torch.ones_like(nodes[..., :1]).scatter(1, drop.unsqueeze(-1), 0.0)
            nodes = nodes * keep
        if self.global_tf is not None:
            g = self.global_tf(nodes, src_key_padding_mask=pmask)
        else:
            g = self.global_attn(nodes, nodes, nodes, key_padding_mask=pmask, need_weights=need_weights)[0]
        focal = g[:, 0]
        traj = self.traj(focal).view(bsz, K, T, 2).cumsum(dim=2)
        logits = self.score(focal)
        aux = None
        if drop is not None:
            rec = self.complete(g.gather(1, drop.unsqueeze(-1).expand(-1, -1, g.shape[-1])))
            aux = F.smooth_l1_loss(rec.float(), target.float())
        return traj, logits, aux


def make_batch(bsz):
    g = torch.Generator().manual_seed(bsz)
    agents = torch.randn(bsz, A, V, FEAT, device=device)
    lanes = torch.randn(bsz, L, V, FEAT, device=device)
    alen = torch.randint(1, V + 1, (bsz, A), generator=g)
    llen = torch.randint(2, V + 1, (bsz, L), generator=g)
    ar = torch.arange(V)
    amask = (ar[None, None] < alen[..., None]).to(device)
    lmask = (ar[None, None] < llen[..., None]).to(device)
    present = torch.rand(bsz, A + L, generator=g) < 0.85
    present[:, 0] = True
    pmask = (~present).to(device)
    drop = torch.stack([torch.randperm(A + L - 1, generator=g)[: (A + L) // 10] + 1 for _ in range(bsz)]).to(device)
    gt = torch.randn(bsz, T, 2, device=device).cumsum(dim=1)
    return agents, amask, lanes, lmask, pmask, drop, gt


def wta_loss(traj, logits, gt):
    ade = (traj.float() - gt.unsqueeze(1)).norm(dim=-1).mean(dim=-1)  # [B, K]
    best = ade.argmin(dim=1)
    best_traj = traj.gather(1, best.view(-1, 1, 1, 1).expand(-1, 1, T, 2)).squeeze(1)
    reg = F.smooth_l1_loss(best_traj.float(), gt)
    cls = F.cross_entropy(logits.float(), best)
    return reg + cls


model = VectorNet().to(device)
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.3)
B = 128
for step in range(5):
    agents, amask, lanes, lmask, pmask, drop, gt = make_batch(B)
    traj, logits, aux = model(agents, amask, lanes, lmask, pmask, drop)
    loss = wta_loss(traj, logits, gt) + aux
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    print(f"fp32 step {step} loss {loss.item():.4f}")
del traj, logits, aux, loss, agents, amask, lanes, lmask, pmask, drop, gt
report("train fp32 fused adam")

model.eval()
with torch.inference_mode():
    agents, amask, lanes, lmask, pmask, _, gt = make_batch(256)
    traj, logits, _ = model(agents, amask, lanes, lmask, pmask, need_weights=False)
    err = (traj - gt.unsqueeze(1)).norm(dim=-1)
    min_ade = err.mean(dim=-1).min(dim=1)[0].mean()
    min_fde = err[..., -1].min(dim=1)[0].mean()
    print(f"eval minADE {min_ade.item():.3f} minFDE {min_fde.item():.3f}")
del agents, amask, lanes, lmask, pmask, gt, traj, logits, err, min_ade, min_fde
report("eval inference_mode batch 256")

model.train()
layer = nn.TransformerEncoderLayer(2 * H, 4, dim_feedforward=512, dropout=0.1, batch_first=True, norm_first=True)
model.global_tf = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, foreach=True)
for step in range(3):
    agents, amask, lanes, lmask, pmask, drop, gt = make_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        traj, logits, aux = model(agents, amask, lanes, lmask, pmask, drop)
        loss = wta_loss(traj, logits, gt) + aux
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"bf16 transformer step {step} loss {loss.item():.4f}")
del traj, logits, aux, loss, agents, amask, lanes, lmask, pmask, drop, gt, opt
report("train bf16 transformer global graph")

torch.cuda.empty_cache()
model.eval().to(torch.bfloat16)
with torch.inference_mode():
    agents, amask, lanes, lmask, pmask, _, gt = make_batch(512)
    traj, logits, _ = model(agents.bfloat16(), amask, lanes.bfloat16(), lmask, pmask)
    print("bf16 inference", tuple(traj.shape), logits.float().softmax(-1).max(-1)[0].mean().item())
report("inference bf16 batch 512")
