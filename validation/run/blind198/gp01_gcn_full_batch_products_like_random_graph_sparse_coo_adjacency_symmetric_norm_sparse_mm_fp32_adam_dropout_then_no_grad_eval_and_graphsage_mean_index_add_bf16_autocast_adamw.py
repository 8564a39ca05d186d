"""Full-batch node classification on an ogbn-products-like random graph, written without PyG.

Graph: 400,000 nodes with 100 float features and 47 classes; 3,000,000 random directed edges drawn on the
device, made undirected (both directions) plus one self loop per node. GCN (Kipf & Welling): the
symmetric normalisation D^-1/2 (A + I) D^-1/2 computed by hand (degrees with index_add_, one weight per
edge), the adjacency held as a coalesced torch.sparse_coo_tensor and applied with torch.sparse.mm. Three
GCN layers 100 -> 256 -> 256 -> 47 with ReLU and dropout 0.5, cross-entropy on a random 10 % train mask,
fp32, Adam (lr 0.01, weight decay 5e-4).

Then GraphSAGE (mean aggregator, root weight) on the same edges: neighbour features gathered with
index_select and summed into the destination rows with index_add_, divided by the in-degree; three layers
100 -> 256 -> 256 -> 47 under bf16 autocast (the aggregation buffers in the messages' dtype), AdamW (lr
3e-3) with gradient clipping at 1.0.

Phases: building the graph and the normalised adjacency; the first GCN step; 5 more GCN steps; GCN
evaluation under no_grad (accuracy on the validation mask); 3 GraphSAGE steps under bf16 autocast. 5
phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1981)
if SMALL:
    N, E, STEPS = 2000, 10000, 1
else:
    N, E, STEPS = 400_000, 3_000_000, 5
F_IN, HID, N_CLASSES = 100, 256, 47
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


x = torch.randn(N, F_IN, device=device)
y = torch.randint(0, N_CLASSES, (N,), device=device)
split = torch.rand(N, device=device)
train_mask = split < 0.1
val_mask = (split >= 0.1) & (split < 0.15)

src = torch.randint(0, N, (E,), device=device)
dst = torch.randint(0, N, (E,), device=device)
loops = torch.arange(N, device=device)
row = torch.cat([src, dst, loops])
col = torch.cat([dst, src, loops])
deg = torch.zeros(N, device=device).index_add_(0, row, torch.ones(row.numel(), device=device))
dinv = deg.pow(-0.5)
w = dinv[row] * dinv[col]
adj = torch.sparse_coo_tensor(torch.stack([row, col]), w, (N, N)).coalesce()
print(f"graph: {N} nodes, {adj._nnz()} nonzeros")
report("build")


class GCNLayer(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin = nn.Linear(d_in, d_out, bias=False)
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, a, h):
        return torch.sparse.mm(a, self.lin(h)) + self.bias


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([GCNLayer(F_IN, HID), GCNLayer(HID, HID), GCNLayer(HID, N_CLASSES)])

    def forward(self, a, h):
        for i, layer in enumerate(self.layers):
            h = F.dropout(h, 0.5, self.training)
            h = layer(a, h)
            if i < len(self.layers) - 1:
                h = F.relu(h)
        return h


model = GCN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)


def gcn_step():
    model.train()
    opt.zero_grad()
    out = model(adj, x)
    loss = F.cross_entropy(out[train_mask], y[train_mask])
    loss.backward()
    opt.step()
    return loss.item()


print(f"gcn step 0 loss {gcn_step():.4f}")
report("gcn first step")
for _ in range(STEPS):
    loss = gcn_step()
print(f"gcn step {STEPS} loss {loss:.4f}")
report("gcn train")

model.eval()
with torch.no_grad():
    pred = model(adj, x).argmax(-1)
    acc = (pred[val_mask] == y[val_mask]).float().mean().item()
print(f"gcn val acc {acc:.4f}")
report("gcn eval")
del pred


class SAGELayer(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin_l = nn.Linear(d_in, d_out)
        self.lin_r = nn.Linear(d_in, d_out, bias=False)

    def forward(self, h, src, dst, inv_deg):
        msg = h.index_select(0, src)
        agg = torch.zeros(h.shape[0], h.shape[1], dtype=h.dtype, device=h.device).index_add_(0, dst, msg)
        agg = agg * inv_deg.to(h.dtype).unsqueeze(-1)
        return self.lin_l(agg) + self.lin_r(h)


class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([SAGELayer(F_IN, HID), SAGELayer(HID, HID), SAGELayer(HID, N_CLASSES)])

    def forward(self, h, src, dst, inv_deg):
        for i, layer in enumerate(self.layers):
            h = layer(h, src, dst, inv_deg)
            if i < len(self.layers) - 1:
                h = F.dropout(F.relu(h), 0.5, self.training)
        return h


e_src = torch.cat([src, dst])
e_dst = torch.cat([dst, src])
in_deg = torch.zeros(N, device=device).index_add_(0, e_dst, torch.ones(e_dst.numel(), device=device))
inv_deg = 1.0 / in_deg.clamp(min=1)
sage = SAGE().to(device)
sage_opt = torch.optim.AdamW(sage.parameters(), lr=3e-3)
sage.train()
for step in range(3):
    sage_opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = sage(x, e_src, e_dst, inv_deg)
        loss = F.cross_entropy(out[train_mask].float(), y[train_mask])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(sage.parameters(), 1.0)
    sage_opt.step()
    print(f"sage step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"sage allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
