"""A hybrid GCN + GAT node classifier written with torch.sparse and scatter ops (after the PyG-free
tutorials): a random graph of 65,536 nodes and 1,048,576 edges (plus self loops) built as a COO
tensor, coalesced, symmetric-normalised by degrees from index_add_; each layer is a GCN propagation
torch.sparse.mm(A_hat, X W) (constant COO adjacency, gradients to the dense operand) plus a 4-head
graph attention whose edge scores are gathered on the coalesced edge list, softmaxed per row by hand
(scatter_reduce amax, index_add_ of the exponentials) and aggregated with index_add_; 2 layers of
256, 40 classes, fp32, Adam, 3 steps; then an inference pass whose input is a mean aggregation by a
CSR adjacency (to_sparse_csr, then the CSR matrix @ the features); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11801)
N, E, FIN, HEADS, DH, NCLS, STEPS = (
    (256, 2048, 16, 2, 8, 5, 2) if SMALL else (65536, 1048576, 128, 4, 64, 40, 3)
)
device = "cuda" if torch.cuda.is_available() else "cpu"

src = torch.randint(0, N, (E,), device=device)
dst = torch.randint(0, N, (E,), device=device)
loops = torch.arange(N, device=device)
idx = torch.stack([torch.cat([dst, loops]), torch.cat([src, loops])])
adj = torch.sparse_coo_tensor(idx, torch.ones(idx.size(1), device=device), (N, N)).coalesce()
rows, cols = adj.indices()
deg = torch.zeros(N, device=device).index_add_(0, rows, torch.ones_like(rows, dtype=torch.float))
norm = deg[rows].rsqrt() * deg[cols].rsqrt()
a_hat = torch.sparse_coo_tensor(adj.indices(), norm, (N, N)).coalesce()
x = torch.randn(N, FIN, device=device)
y = torch.randint(0, NCLS, (N,), device=device)
del src, dst, loops, idx


class HybridLayer(nn.Module):
    def __init__(self, cin, cout, heads):
        super().__init__()
        self.heads, self.cout = heads, cout
        self.gcn = nn.Linear(cin, heads * cout)
        self.qkv = nn.Linear(cin, 3 * heads * cout)
        self.proj = nn.Linear(heads * cout, heads * cout)

    def forward(self, h):
        g = torch.sparse.mm(a_hat, self.gcn(h))
        q, k, v = self.qkv(h).view(N, 3, self.heads, self.cout).unbind(1)
        e = (q[rows] * k[cols]).sum(-1) * self.cout**-0.5
        emax = torch.full((N, self.heads), -1e30, device=e.device)
        emax = emax.scatter_reduce(0, rows[:, None].expand_as(e), e, "amax", include_self=True)
        w = (e - emax[rows]).exp()
        den = torch.zeros(N, self.heads, device=e.device).index_add_(0, rows, w)
        msg = (w / den[rows]).unsqueeze(-1) * v[cols]
        att = torch.zeros(N, self.heads, self.cout, device=e.device).index_add_(0, rows, msg)
        return F.elu(g + self.proj(att.flatten(1)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = HybridLayer(FIN, DH, HEADS)
        self.l2 = HybridLayer(HEADS * DH, DH, HEADS)
        self.head = nn.Linear(HEADS * DH, NCLS)

    def forward(self, h):
        return self.head(self.l2(self.l1(h)))


model = Net().to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
if device == "cuda":
    print(f"graph {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

with torch.no_grad():
    adj_csr = adj.to_sparse_csr()
    mean_agg = (adj_csr @ x) / deg.unsqueeze(1)
    pred = model(mean_agg).argmax(-1)
if device == "cuda":
    print(
        f"infer acc {(pred == y).float().mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
