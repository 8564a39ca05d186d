"""GCNII (Chen et al. 2020, "Simple and Deep Graph Convolutional Networks", written after the
authors' PyTorch code): a synthetic citation graph of ogbn-arxiv's size (169,343 nodes, 128
features, 40 classes) whose 1,166,243 random directed edges are made on the host by a seeded
generator, symmetrised by `torch.cat`, self loops added, duplicates merged by `coalesce()`, the
degrees by `index_add_`, the values D^-1/2 (A + I) D^-1/2, then the matrix turned to CSR
(`to_sparse_csr`) and moved to the GPU; 32 GCNII layers of width 256 (initial residual alpha 0.1,
identity mapping beta = log(lambda / l + 1)) over `torch.sparse.mm(adj, h)`, dropout between
layers, the input and output Linear layers; fp32 (TF32 off), Adam with the paper's two weight-decay
groups (0.01 on the convolutions, 5e-4 on the dense layers), 4 full-graph steps; then the full-graph
evaluation under no_grad with per-split accuracies and a 16-layer variant evaluated from the same
weights; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14101)
N, E, F_IN, N_CLS = (2000, 9000, 16, 5) if SMALL else (169343, 1166243, 128, 40)
HID, LAYERS = (32, 4) if SMALL else (256, 32)
STEPS = 2 if SMALL else 4
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = False


def normalized_adjacency(n, e, gen):
    src = torch.randint(0, n, (e,), generator=gen)
    dst = torch.randint(0, n, (e,), generator=gen)
    loops = torch.arange(n)
    row = torch.cat([src, dst, loops])
    col = torch.cat([dst, src, loops])
    adj = torch.sparse_coo_tensor(torch.stack([row, col]), torch.ones(row.numel()), (n, n)).coalesce()
    row, col = adj.indices()
    deg = torch.zeros(n).index_add_(0, row, torch.ones(row.numel()))
    dinv = deg.pow(-0.5)
    vals = dinv[row] * dinv[col]
    return torch.sparse_coo_tensor(adj.indices(), vals, (n, n)).coalesce().to_sparse_csr()


class GCNIIConv(nn.Module):
    def __init__(self, hid, layer, alpha=0.1, lamda=0.5):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(hid, hid))
        self.alpha = alpha
        self.beta = math.log(lamda / layer + 1)
        stdv = 1.0 / math.sqrt(hid)
        self.weight.data.uniform_(-stdv, stdv)

    def forward(self, h, h0, adj):
        hi = torch.sparse.mm(adj, h)
        support = (1 - self.alpha) * hi + self.alpha * h0
        return self.beta * torch.mm(support, self.weight) + (1 - self.beta) * support


class GCNII(nn.Module):
    def __init__(self, f_in, hid, n_cls, layers, dropout=0.5):
        super().__init__()
        self.convs = nn.ModuleList([GCNIIConv(hid, i + 1) for i in range(layers)])
        self.fcs = nn.ModuleList([nn.Linear(f_in, hid), nn.Linear(hid, n_cls)])
        self.dropout = dropout

    def forward(self, x, adj, depth=None):
        x = F.dropout(x, self.dropout, self.training)
        h0 = F.relu(self.fcs[0](x))
        h = h0
        for conv in self.convs[: depth or len(self.convs)]:
            h = F.dropout(h, self.dropout, self.training)
            h = F.relu(conv(h, h0, adj))
        h = F.dropout(h, self.dropout, self.training)
        return F.log_softmax(self.fcs[-1](h), dim=1)


gen = torch.Generator().manual_seed(141)
adj = normalized_adjacency(N, E, gen).to(device)
x = torch.randn(N, F_IN, generator=gen).to(device)
y = torch.randint(0, N_CLS, (N,), generator=gen).to(device)
perm = torch.randperm(N, generator=gen)
n_tr, n_va = int(0.54 * N), int(0.18 * N)
splits = {
    "train": perm[:n_tr].to(device),
    "valid": perm[n_tr : n_tr + n_va].to(device),
    "test": perm[n_tr + n_va :].to(device),
}
if device == "cuda":
    print(
        f"graph nnz {adj.values().numel()} allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model = GCNII(F_IN, HID, N_CLS, LAYERS).to(device)
opt = torch.optim.Adam(
    [
        {"params": model.convs.parameters(), "weight_decay": 0.01},
        {"params": model.fcs.parameters(), "weight_decay": 5e-4},
    ],
    lr=0.01,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    opt.zero_grad()
    out = model(x, adj)
    loss = F.nll_loss(out[splits["train"]], y[splits["train"]])
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
del out, loss
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    pred = model(x, adj).argmax(dim=-1)
    accs = {k: (pred[v] == y[v]).float().mean().item() for k, v in splits.items()}
if device == "cuda":
    print(f"eval {accs} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    logp = model(x, adj, depth=LAYERS // 2)
    shallow = (logp.argmax(-1)[splits["test"]] == y[splits["test"]]).float().mean().item()
if device == "cuda":
    print(
        f"shallow {shallow:.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
