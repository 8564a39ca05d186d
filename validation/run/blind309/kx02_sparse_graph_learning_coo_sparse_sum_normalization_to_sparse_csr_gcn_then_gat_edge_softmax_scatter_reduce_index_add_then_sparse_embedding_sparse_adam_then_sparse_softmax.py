"""Full-batch graph learning on a synthetic circulant graph with torch.sparse and index ops, as a PyG-free
tutorial would write it: adjacency built as a COO tensor, normalised with `torch.sparse.sum`, held in CSR
for propagation; GAT attention as an edge softmax by `scatter_reduce(amax)` / `index_add_`; node
embeddings with sparse gradients under `torch.optim.SparseAdam`; attention re-normalised with
`torch.sparse.softmax` for inference.

Graph: 120,000 nodes, every node linked to 12 fixed offsets (i + o mod N), 1,440,000 directed edges plus
self loops; node features 256-d, 16 classes. Phases: (1) graph construction: COO indices, `coalesce()`,
degrees by `torch.sparse.sum(A, dim=1).to_dense()`, D^-1/2 A D^-1/2 values, `to_sparse_csr()`;
(2) GCN: two layers `torch.sparse.mm(A_csr, X @ W)` with dropout, Adam, 10 full-batch epochs on a 30%
training mask; (3) GAT-style single-head attention: per-edge scores `leaky_relu(a_src[row] + a_dst[col])`,
an edge softmax (`scatter_reduce(amax)`, exp, `index_add_` of the sums), messages `att[:, None] * h[col]`
summed by `index_add_`, 6 Adam steps; (4) learnable node embeddings `nn.Embedding(N, 64, sparse=True)`
propagated through `A_csr` and trained by `SparseAdam` (embeddings) plus Adam (classifier) over 5 steps of
8,192-node batches; (5) inference: edge scores put as the values of a COO tensor,
`torch.sparse.softmax(S, dim=1)`, two hops of `torch.sparse.mm` under `torch.no_grad`, argmax accuracy."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(30902)
device = "cuda" if torch.cuda.is_available() else "cpu"
N, K, FEAT, HID, CLASSES, EMB = 120_000, 12, 256, 128, 16, 64


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


# Phase 1: the graph.
offsets = torch.tensor([1, 2, 5, 17, 64, 301, 1024, 4099, 16411, 40009, 77773, 99991], device=device)
rows = torch.arange(N, device=device).repeat_interleave(K)
cols = (rows + offsets.repeat(N)) % N
loops = torch.arange(N, device=device)
index = torch.stack([torch.cat([rows, loops]), torch.cat([cols, loops])])
A = torch.sparse_coo_tensor(index, torch.ones(index.shape[1], device=device), (N, N)).coalesce()
deg = torch.sparse.sum(A, dim=1).to_dense()
dinv = deg.pow(-0.5)
r, c = A.indices()
A_norm = torch.sparse_coo_tensor(A.indices(), dinv[r] * A.values() * dinv[c], (N, N), is_coalesced=True)
A_csr = A_norm.to_sparse_csr()
print("nnz", A_csr.values().numel(), "mean degree", deg.mean().item())
X = torch.randn(N, FEAT, device=device)
y = torch.randint(0, CLASSES, (N,), device=device)
train_idx = torch.randperm(N, device=device)[: int(0.3 * N)]
report("phase 1 graph")


# Phase 2: GCN.
class GCN(nn.Module):
    def __init__(self, inp):
        super().__init__()
        self.w1 = nn.Linear(inp, HID)
        self.w2 = nn.Linear(HID, CLASSES)

    def forward(self, adj, x):
        h = F.relu(torch.sparse.mm(adj, self.w1(F.dropout(x, 0.5, self.training))))
        return torch.sparse.mm(adj, self.w2(F.dropout(h, 0.5, self.training)))


gcn = GCN(FEAT).to(device)
opt = torch.optim.Adam(gcn.parameters(), lr=0.01, weight_decay=5e-4)
for _ in range(10):
    out = gcn(A_csr, X)
    loss = F.cross_entropy(out[train_idx], y[train_idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("gcn loss", loss.item())
del out, loss
report("phase 2 gcn")


# Phase 3: attention over edges by index ops.
class EdgeAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(FEAT, HID, bias=False)
        self.a_src = nn.Parameter(torch.randn(HID) * 0.1)
        self.a_dst = nn.Parameter(torch.randn(HID) * 0.1)
        self.cls = nn.Linear(HID, CLASSES)

    def scores(self, h):
        return F.leaky_relu((h @ self.a_src)[r] + (h @ self.a_dst)[c], 0.2)

    def forward(self, x):
        h = self.proj(x)
        e = self.scores(h)
        emax = torch.full((N,), float("-inf"), device=x.device).scatter_reduce(
            0, r, e, "amax", include_self=True
        )
        w = torch.exp(e - emax[r])
        denom = torch.zeros(N, device=x.device).index_add_(0, r, w)
        att = w / denom[r]
        msg = att[:, None] * h[c]
        agg = torch.zeros_like(h).index_add_(0, r, msg)
        return self.cls(F.elu(agg))


gat = EdgeAttention().to(device)
opt = torch.optim.Adam(gat.parameters(), lr=5e-3)
for _ in range(6):
    loss = F.cross_entropy(gat(X)[train_idx], y[train_idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("gat loss", loss.item())
del loss, opt
report("phase 3 edge attention")

# Phase 4: node embeddings with sparse gradients.
emb = nn.Embedding(N, EMB, sparse=True).to(device)
head = GCN(EMB).to(device)
sparse_opt = torch.optim.SparseAdam(emb.parameters(), lr=0.01)
dense_opt = torch.optim.Adam(head.parameters(), lr=0.01)
for _ in range(5):
    nodes = torch.randint(0, N, (8192,), device=device)
    out = head(A_csr, emb(torch.arange(N, device=device)))[nodes]
    loss = F.cross_entropy(out, y[nodes])
    sparse_opt.zero_grad(set_to_none=True)
    dense_opt.zero_grad(set_to_none=True)
    loss.backward()
    sparse_opt.step()
    dense_opt.step()
print("embedding loss", loss.item(), "grad layout", emb.weight.grad.layout)
del out, loss
report("phase 4 sparse embeddings")

# Phase 5: attention as a sparse COO softmax, two hops, no grad.
with torch.no_grad():
    gat.eval()
    h = gat.proj(X)
    S = torch.sparse_coo_tensor(A.indices(), gat.scores(h), (N, N), is_coalesced=True)
    att = torch.sparse.softmax(S, dim=1)
    for _ in range(2):
        h = torch.sparse.mm(att, h)
    pred = gat.cls(F.elu(h)).argmax(-1)
    acc = (pred == y).float().mean()
print("accuracy", acc.item())
report("phase 5 sparse softmax inference")
