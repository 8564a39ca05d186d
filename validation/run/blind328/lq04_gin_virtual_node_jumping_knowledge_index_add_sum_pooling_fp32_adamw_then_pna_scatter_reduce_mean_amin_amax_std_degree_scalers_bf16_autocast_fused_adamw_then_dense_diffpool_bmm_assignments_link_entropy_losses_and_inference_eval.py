"""Graph classification on a fixed synthetic dataset of 8,192 molecule-sized graphs (32 nodes and 96
undirected edges each, 9 atom types, 16 continuous node features, 10 classes), batched by hand:
a batch of B graphs is a slice of the node and edge tensors plus node-index offsets, and a batch vector
graph_id = arange(B).repeat_interleave(32).

Phases: GIN-eps (Xu et al. 2019) with a virtual node (per-graph state added to every node, updated
from the pooled nodes by an MLP), 5 layers of index_add_ sum aggregation into MLPs with BatchNorm,
jumping-knowledge concatenation and sum pooling by index_add_, fp32 AdamW, 30 steps of 256 graphs;
PNA (Corso et al. 2020): mean, min, max and std aggregators by scatter_reduce (include_self=False)
with identity, amplification and attenuation degree scalers (log(d + 1) / delta), 4 layers under bf16
autocast with fused AdamW, 30 steps of 256 graphs; DiffPool (Ying et al. 2018) on dense (B, 32, 32)
adjacencies built by index_put_ with accumulate: dense GCN embedding and assignment networks, softmax
to 8 clusters, S^T Z and S^T A S by bmm, the link-prediction (Frobenius) and entropy auxiliary losses,
a second level pooled to one cluster, fp32 Adam, 30 steps of 512 graphs; inference of all three
models over 2,048 graphs at a time under inference_mode. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3284)
device = "cuda" if torch.cuda.is_available() else "cpu"
NN_, NE, NT, FC, NCLS = 32, 96, 9, 16, 10
if SMALL:
    NG, HID, B, B_DP, B_EVAL, STEPS = 256, 32, 32, 64, 128, 4
else:
    NG, HID, B, B_DP, B_EVAL, STEPS = 8192, 300, 256, 512, 2048, 30


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


# --- dataset: fixed-size graphs ---
atom = torch.randint(0, NT, (NG, NN_), device=device)
xcont = torch.randn(NG, NN_, FC, device=device)
es = torch.randint(0, NN_, (NG, NE), device=device)
ed = (es + torch.randint(1, NN_, (NG, NE), device=device)) % NN_  # no self loops
y = torch.randint(0, NCLS, (NG,), device=device)


def batch(start, b):
    """Flattened node features and (2, E) edge index (both directions) for graphs start..start+b."""
    off = (torch.arange(b, device=device) * NN_)[:, None]
    s = (es[start : start + b] + off).reshape(-1)
    d = (ed[start : start + b] + off).reshape(-1)
    ei = torch.stack([torch.cat([s, d]), torch.cat([d, s])])
    gid = torch.arange(b, device=device).repeat_interleave(NN_)
    return atom[start : start + b].reshape(-1), xcont[start : start + b].reshape(-1, FC), ei, gid


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(NT, HID)
        self.lin = nn.Linear(FC, HID)

    def forward(self, a, x):
        return self.emb(a) + self.lin(x)


def mlp2(i, o):
    return nn.Sequential(nn.Linear(i, o), nn.BatchNorm1d(o), nn.ReLU(), nn.Linear(o, o))


class GIN(nn.Module):
    def __init__(self, layers=5):
        super().__init__()
        self.enc = Encoder()
        self.eps = nn.Parameter(torch.zeros(layers))
        self.convs = nn.ModuleList(mlp2(HID, HID) for _ in range(layers))
        self.bns = nn.ModuleList(nn.BatchNorm1d(HID) for _ in range(layers))
        self.vn_mlps = nn.ModuleList(mlp2(HID, HID) for _ in range(layers - 1))
        self.head = nn.Sequential(
            nn.Linear(HID * (layers + 1), HID), nn.ReLU(), nn.Dropout(0.5), nn.Linear(HID, NCLS)
        )

    def forward(self, a, x, ei, gid, b):
        h = self.enc(a, x)
        vn = torch.zeros(b, HID, device=h.device, dtype=h.dtype)
        hs = [h]
        for i, conv in enumerate(self.convs):
            h = h + vn[gid]
            agg = torch.zeros_like(h).index_add_(0, ei[1], h[ei[0]])
            h_new = self.bns[i](conv((1 + self.eps[i]) * h + agg))
            if i < len(self.convs) - 1:
                h_new = F.relu(h_new)
                pooled = torch.zeros(b, HID, device=h.device, dtype=h.dtype).index_add_(0, gid, h)
                vn = F.relu(self.vn_mlps[i](pooled + vn))
            h = F.dropout(h_new, 0.5, self.training)
            hs.append(h)
        jk = torch.cat(hs, 1)
        g = torch.zeros(b, jk.shape[1], device=h.device, dtype=jk.dtype).index_add_(0, gid, jk)
        return self.head(g)


class PNALayer(nn.Module):
    def __init__(self, delta):
        super().__init__()
        self.delta = delta
        self.pre = nn.Linear(2 * HID, HID)
        self.post = nn.Sequential(nn.Linear(13 * HID, HID), nn.BatchNorm1d(HID), nn.ReLU())

    def forward(self, h, ei, logdeg):
        n = h.shape[0]
        m = self.pre(torch.cat([h[ei[1]], h[ei[0]]], 1))
        idx = ei[1][:, None].expand_as(m)
        zeros = torch.zeros(n, HID, device=h.device, dtype=m.dtype)
        mean = zeros.scatter_reduce(0, idx, m, "mean", include_self=False)
        mn = zeros.scatter_reduce(0, idx, m, "amin", include_self=False)
        mx = zeros.scatter_reduce(0, idx, m, "amax", include_self=False)
        sq = zeros.scatter_reduce(0, idx, m * m, "mean", include_self=False)
        std = (sq - mean * mean).clamp(min=0).add(1e-5).sqrt()
        aggs = torch.cat([mean, mn, mx, std], 1)
        s = (logdeg / self.delta)[:, None].to(aggs.dtype)
        out = torch.cat([h, aggs, aggs * s, aggs / s.clamp(min=1e-2)], 1)
        return h + self.post(out)


class PNA(nn.Module):
    def __init__(self, delta, layers=4):
        super().__init__()
        self.enc = Encoder()
        self.layers = nn.ModuleList(PNALayer(delta) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, NCLS))

    def forward(self, a, x, ei, gid, b):
        h = self.enc(a, x)
        deg = torch.zeros(h.shape[0], device=h.device).index_add_(
            0, ei[1], torch.ones(ei.shape[1], device=h.device)
        )
        logdeg = torch.log(deg + 1)
        for layer in self.layers:
            h = layer(h, ei, logdeg)
        g = torch.zeros(b, HID, device=h.device, dtype=h.dtype).index_add_(0, gid, h) / NN_
        return self.head(g)


def dense_adj(start, b):
    adj = torch.zeros(b, NN_, NN_, device=device)
    gi = torch.arange(b, device=device)[:, None].expand(b, NE)
    one = torch.ones(b, NE, device=device)
    adj.index_put_((gi, es[start : start + b], ed[start : start + b]), one, accumulate=True)
    adj.index_put_((gi, ed[start : start + b], es[start : start + b]), one, accumulate=True)
    return adj.clamp_(max=1)


class DenseGCN(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.lin = nn.Linear(i, o)

    def forward(self, x, adj):
        a = adj + torch.eye(adj.shape[-1], device=adj.device)
        dinv = a.sum(-1).clamp(min=1).rsqrt()
        a = dinv[..., :, None] * a * dinv[..., None, :]
        return F.relu(self.lin(torch.bmm(a, x)))


class DiffPool(nn.Module):
    def __init__(self, clusters=8):
        super().__init__()
        self.enc = Encoder()
        self.embed1 = nn.ModuleList([DenseGCN(HID, HID), DenseGCN(HID, HID)])
        self.assign1 = nn.ModuleList([DenseGCN(HID, HID), DenseGCN(HID, clusters)])
        self.embed2 = nn.ModuleList([DenseGCN(HID, HID), DenseGCN(HID, HID)])
        self.head = nn.Sequential(nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, NCLS))

    def forward(self, a, x, adj):
        b = adj.shape[0]
        h = self.enc(a, x).view(b, NN_, HID)
        z, s = h, h
        for layer in self.embed1:
            z = layer(z, adj)
        for layer in self.assign1:
            s = layer(s, adj)
        s = torch.softmax(s, -1)
        link = (adj - torch.bmm(s, s.transpose(1, 2))).norm(p=2) / adj.numel()
        ent = (-s * torch.log(s + 1e-15)).sum(-1).mean()
        x2 = torch.bmm(s.transpose(1, 2), z)
        adj2 = torch.bmm(torch.bmm(s.transpose(1, 2), adj), s)
        for layer in self.embed2:
            x2 = layer(x2, adj2)
        return self.head(x2.mean(1)), link + ent


# --- GIN with virtual node, fp32 ---
gin = GIN().to(device)
opt = torch.optim.AdamW(gin.parameters(), lr=1e-3, weight_decay=1e-2)
for step in range(STEPS):
    start = (step * B) % NG
    a, x, ei, gid = batch(start, B)
    loss = F.cross_entropy(gin(a, x, ei, gid, B), y[start : start + B])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"gin loss {loss.item():.4f}")
report("gin_virtual_node_fp32")

# --- PNA, bf16 autocast ---
_, _, ei0, _ = batch(0, NG)
deg_all = torch.bincount(ei0[1], minlength=NG * NN_)
delta = torch.log(deg_all.float() + 1).mean().item()
del ei0, deg_all
pna = PNA(delta).to(device)
opt2 = torch.optim.AdamW(pna.parameters(), lr=1e-3, fused=True)
for step in range(STEPS):
    start = (step * B) % NG
    a, x, ei, gid = batch(start, B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = pna(a, x, ei, gid, B)
    loss = F.cross_entropy(logits.float(), y[start : start + B])
    opt2.zero_grad(set_to_none=True)
    loss.backward()
    opt2.step()
print(f"pna loss {loss.item():.4f} delta {delta:.3f}")
report("pna_bf16_autocast")

# --- DiffPool, dense fp32 ---
dp = DiffPool().to(device)
opt3 = torch.optim.Adam(dp.parameters(), lr=1e-3)
for step in range(STEPS):
    start = (step * B_DP) % NG
    adj = dense_adj(start, B_DP)
    a = atom[start : start + B_DP].reshape(-1)
    x = xcont[start : start + B_DP].reshape(-1, FC)
    logits, aux = dp(a, x, adj)
    loss = F.cross_entropy(logits, y[start : start + B_DP]) + aux
    opt3.zero_grad(set_to_none=True)
    loss.backward()
    opt3.step()
print(f"diffpool loss {loss.item():.4f}")
report("diffpool_dense")

gin.eval(), pna.eval(), dp.eval()
correct = torch.zeros(3, device=device)
with torch.inference_mode():
    for start in range(0, NG, B_EVAL):
        a, x, ei, gid = batch(start, B_EVAL)
        yy = y[start : start + B_EVAL]
        correct[0] += (gin(a, x, ei, gid, B_EVAL).argmax(-1) == yy).sum()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            correct[1] += (pna(a, x, ei, gid, B_EVAL).argmax(-1) == yy).sum()
        correct[2] += (dp(a, x, dense_adj(start, B_EVAL))[0].argmax(-1) == yy).sum()
print("train accuracy gin/pna/diffpool", [round(v, 4) for v in (correct / NG).tolist()])
report("inference")
