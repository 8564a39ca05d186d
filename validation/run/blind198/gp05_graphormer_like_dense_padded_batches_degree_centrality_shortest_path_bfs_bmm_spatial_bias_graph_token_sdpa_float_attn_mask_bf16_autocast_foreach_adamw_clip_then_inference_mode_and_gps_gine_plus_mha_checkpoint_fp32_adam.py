"""A Graphormer-like graph transformer (Ying et al. 2021) on padded batches of small graphs, then a
GPS-like hybrid (Rampasek et al. 2022), both written by hand.

Data: batches of 256 molecule-like graphs of 20 to 63 nodes made on the host (sizes, ~1.2 bonds per atom
inside each graph, 9 categorical atom features), copied to the device and padded there: node positions
from the batch vector and the graph offsets, node features scattered into a (B, Nmax, 768) dense tensor,
a dense boolean adjacency (B, Nmax, Nmax), in- and out-degrees, and all-pairs shortest-path distances
by breadth-first search with batched matrix products (bmm of the reached set and the adjacency, up to 20
hops; unreachable pairs get distance 21). Graphormer: a graph token prepended (65 tokens at most), atom
embeddings summed with in/out-degree centrality embeddings (up to degree 63), 12 pre-LN layers of
width 768 with 32 heads and an FFN of 768 (GELU, dropout 0.1), attention through
F.scaled_dot_product_attention with a float attn_mask of shape (B, 32, N, N): the spatial encoding
nn.Embedding(22, 32) of the distances, a learned graph-token distance per head, and -inf on padded
keys (the mask requires grad). A linear head on the graph token, a regression target with L1 loss
(PCQM4M-like). bf16 autocast, AdamW(foreach=True, lr 2e-4, weight decay 0.01), clip_grad_norm_(5.0),
linear warmup.

Phases: the first batch's preprocessing and the first step; 4 more steps; evaluation of 4 batches under
torch.inference_mode with predictions on the host; then a GPS model (6 layers of width 256: a local GINE
message passing on the sparse edges with index_add_ plus global nn.MultiheadAttention over the dense
batch with key_padding_mask, BatchNorm, FFN) at batch 512, each layer under
torch.utils.checkpoint(use_reentrant=False), fp32, Adam (lr 1e-3), 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1985)
if SMALL:
    B, STEPS, EVAL_BATCHES, GPS_B, D, LAYERS, HEADS = 8, 1, 1, 8, 64, 2, 4
else:
    B, STEPS, EVAL_BATCHES, GPS_B, D, LAYERS, HEADS = 256, 4, 4, 512, 768, 12, 32
ATOM_DIMS = [119, 5, 12, 12, 10, 6, 6, 2, 2]
MAX_DIST, MAX_DEG = 20, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def make_batch(num_graphs):
    sizes = torch.randint(20, 64, (num_graphs,))
    ptr = torch.zeros(num_graphs + 1, dtype=torch.long)
    ptr[1:] = sizes.cumsum(0)
    batch = torch.repeat_interleave(torch.arange(num_graphs), sizes)
    n_bonds = (sizes.float() * 1.2).long()
    e_graph = torch.repeat_interleave(torch.arange(num_graphs), n_bonds)
    a = ptr[e_graph] + (torch.rand(e_graph.numel()) * sizes[e_graph]).long()
    b = ptr[e_graph] + (torch.rand(e_graph.numel()) * sizes[e_graph]).long()
    edge_index = torch.stack([torch.cat([a, b]), torch.cat([b, a])])
    x = torch.stack([torch.randint(0, d, (int(ptr[-1]),)) for d in ATOM_DIMS], 1)
    y = torch.randn(num_graphs, 1)
    n_max = int(sizes.max())
    return [t.to(device) for t in (x, edge_index, batch, ptr, y)] + [n_max]


def densify(x, edge_index, batch, ptr, n_max):
    num_graphs = ptr.numel() - 1
    pos = torch.arange(batch.numel(), device=device) - ptr[batch]
    node_mask = torch.zeros(num_graphs, n_max, dtype=torch.bool, device=device)
    node_mask[batch, pos] = True
    x_dense = torch.zeros(num_graphs, n_max, x.shape[1], dtype=x.dtype, device=device)
    x_dense[batch, pos] = x
    src, dst = edge_index
    adj = torch.zeros(num_graphs, n_max, n_max, dtype=torch.bool, device=device)
    adj[batch[src], pos[src], pos[dst]] = True
    adj.diagonal(dim1=1, dim2=2).zero_()
    deg = adj.sum(-1)
    return x_dense, node_mask, adj, deg


def shortest_paths(adj):
    """All-pairs hop distances by breadth-first search: (B, N, N) int64, MAX_DIST + 1 if unreachable."""
    n = adj.shape[-1]
    eye = torch.eye(n, dtype=torch.bool, device=adj.device).expand_as(adj)
    dist = torch.full(adj.shape, MAX_DIST + 1, dtype=torch.long, device=adj.device)
    dist[eye] = 0
    reached = eye.clone()
    frontier = eye.float()
    a = adj.float()
    for d in range(1, MAX_DIST + 1):
        nxt = torch.bmm(frontier, a) > 0
        new = nxt & ~reached
        dist[new] = d
        reached |= new
        frontier = new.float()
    return dist


class AtomEncoder(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(v + 1, d, padding_idx=0) for v in ATOM_DIMS)

    def forward(self, x):
        return sum(e(x[..., i] + 1) for i, e in enumerate(self.embs))


class GraphormerLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Dropout(0.1), nn.Linear(d, d))
        self.drop = nn.Dropout(0.1)

    def forward(self, h, bias):
        b, n, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=0.1 if self.training else 0.0)
        h = h + self.drop(self.proj(a.transpose(1, 2).reshape(b, n, d)))
        return h + self.drop(self.ffn(self.ln2(h)))


class Graphormer(nn.Module):
    def __init__(self, d=D, layers=LAYERS, heads=HEADS):
        super().__init__()
        self.heads = heads
        self.atom = AtomEncoder(d)
        self.in_deg = nn.Embedding(MAX_DEG, d)
        self.out_deg = nn.Embedding(MAX_DEG, d)
        self.graph_token = nn.Parameter(torch.zeros(1, 1, d))
        self.spatial = nn.Embedding(MAX_DIST + 2, heads)
        self.token_dist = nn.Parameter(torch.zeros(1, heads, 1))
        self.layers = nn.ModuleList(GraphormerLayer(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 1)

    def forward(self, x_dense, node_mask, deg, spd):
        b, n = node_mask.shape
        h = (
            self.atom(x_dense)
            + self.in_deg(deg.clamp(max=MAX_DEG - 1))
            + self.out_deg(deg.clamp(max=MAX_DEG - 1))
        )
        h = torch.cat([self.graph_token.expand(b, -1, -1), h], 1)
        bias = h.new_zeros(b, self.heads, n + 1, n + 1, dtype=torch.float32)
        bias[:, :, 1:, 1:] = self.spatial(spd).permute(0, 3, 1, 2)
        bias[:, :, 1:, 0] = self.token_dist
        bias[:, :, 0, :] = self.token_dist
        key_pad = torch.cat([node_mask.new_ones(b, 1), node_mask], 1)
        bias = bias.masked_fill(~key_pad[:, None, None, :], float("-inf"))
        for layer in self.layers:
            h = layer(h, bias)
        return self.head(self.ln(h[:, 0]))


model = Graphormer().to(device)
decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embs" not in n]
no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embs" not in n)]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
    lr=2e-4,
    foreach=True,
)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
print(f"graphormer params {sum(p.numel() for p in model.parameters())}")


def prepare(num_graphs):
    x, edge_index, batch, ptr, y, n_max = make_batch(num_graphs)
    x_dense, node_mask, adj, deg = densify(x, edge_index, batch, ptr, n_max)
    return x_dense, node_mask, deg, shortest_paths(adj), y


def step():
    x_dense, node_mask, deg, spd, y = prepare(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = model(x_dense, node_mask, deg, spd)
        loss = F.l1_loss(pred.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    sched.step()
    return loss.item()


model.train()
print(f"step 0 loss {step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(STEPS):
    loss = step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
preds = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _ in range(EVAL_BATCHES):
        x_dense, node_mask, deg, spd, y = prepare(B)
        preds.append(model(x_dense, node_mask, deg, spd).float().cpu())
preds = torch.cat(preds)
print(f"eval graphs {preds.shape[0]} mean pred {preds.mean():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class GPSLayer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.local = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d))
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.1, batch_first=True)
        self.norm_local = nn.BatchNorm1d(d)
        self.norm_attn = nn.BatchNorm1d(d)
        self.ffn = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Dropout(0.1), nn.Linear(2 * d, d))
        self.norm_ffn = nn.BatchNorm1d(d)

    def forward(self, h, edge_index, batch, pos, node_mask):
        src, dst = edge_index
        agg = torch.zeros_like(h).index_add_(0, dst, F.relu(h[src]))
        h_local = self.norm_local(h + F.dropout(self.local(h + agg), 0.1, self.training))
        dense = h.new_zeros(node_mask.shape[0], node_mask.shape[1], h.shape[1])
        dense[batch, pos] = h
        att, _ = self.attn(dense, dense, dense, key_padding_mask=~node_mask, need_weights=False)
        h_attn = self.norm_attn(h + F.dropout(att[batch, pos], 0.1, self.training))
        out = h_local + h_attn
        return self.norm_ffn(out + self.ffn(out))


class GPS(nn.Module):
    def __init__(self, d=256, layers=6, heads=8):
        super().__init__()
        self.atom = AtomEncoder(d)
        self.layers = nn.ModuleList(GPSLayer(d, heads) for _ in range(layers))
        self.head = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 1))

    def forward(self, x, edge_index, batch, ptr, n_max):
        pos = torch.arange(batch.numel(), device=x.device) - ptr[batch]
        node_mask = torch.zeros(ptr.numel() - 1, n_max, dtype=torch.bool, device=x.device)
        node_mask[batch, pos] = True
        h = self.atom(x)
        for layer in self.layers:
            h = checkpoint(layer, h, edge_index, batch, pos, node_mask, use_reentrant=False)
        g = torch.zeros(ptr.numel() - 1, h.shape[1], device=h.device).index_add_(0, batch, h)
        return self.head(g)


gps = GPS().to(device)
gps_opt = torch.optim.Adam(gps.parameters(), lr=1e-3)
gps.train()
for i in range(3):
    x, edge_index, batch, ptr, y, n_max = make_batch(GPS_B)
    loss = F.l1_loss(gps(x, edge_index, batch, ptr, n_max), y)
    gps_opt.zero_grad(set_to_none=True)
    loss.backward()
    gps_opt.step()
    print(f"gps step {i} loss {loss.item():.4f}")
if device == "cuda":
    print(f"gps allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
