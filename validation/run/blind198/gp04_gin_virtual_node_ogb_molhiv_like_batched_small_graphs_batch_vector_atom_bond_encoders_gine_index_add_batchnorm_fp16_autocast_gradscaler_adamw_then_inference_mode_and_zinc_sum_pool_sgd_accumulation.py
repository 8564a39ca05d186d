"""GIN with a virtual node (OGB's gin-virtual baseline, Hu et al. 2020 / Gilmer et al. 2017) on batches of
small molecule-like graphs, written without PyG: padding-free batches with a batch vector.

Each batch of 4,096 graphs is made on the host, vectorised as a data loader's collate would: graph sizes
drawn in [10, 40) atoms, about 1.1 bonds per atom drawn inside each graph (both directions stored), node
offsets from the cumulative sizes, 9 categorical atom features and 3 categorical bond features with OGB's
vocabulary sizes, one binary label per graph; the batch (edge_index, batch vector, features, labels) is
pinned and copied to the device with non_blocking. Model: AtomEncoder / BondEncoder (a sum of one
embedding per feature column, width 300), 5 GINE layers (messages relu(h[src] + bond embedding) summed
into the destinations with index_add_, MLP 300 -> 600 -> 300 with BatchNorm on (1 + eps) h + aggregate,
BatchNorm, ReLU and dropout 0.5 except after the last), a virtual node per graph added to its nodes before
each layer and updated from global add pooling (index_add_ by the batch vector) through an MLP with
BatchNorm; mean pooling of the final node states with scatter_reduce("mean"); a linear head and
binary_cross_entropy_with_logits. fp16 autocast with GradScaler, AdamW (lr 1e-3).

Phases: the first step; 6 more steps (a new batch each, so node and edge counts vary); evaluation of 4
batches under torch.inference_mode with the probabilities moved to the host; then a ZINC-like
regression model (GIN without the virtual node, 4 layers of width 256, 28 atom types and 4 bond types,
sum pooling, L1 loss) in fp32 with SGD momentum 0.9 and gradient accumulation over 4 micro-batches of
2,048 graphs, 2 optimizer steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1984)
if SMALL:
    G, STEPS, EVAL_BATCHES, ZG = 32, 1, 1, 16
else:
    G, STEPS, EVAL_BATCHES, ZG = 4096, 6, 4, 2048
ATOM_DIMS = [119, 5, 12, 12, 10, 6, 6, 2, 2]
BOND_DIMS = [5, 6, 2]
EMB = 300
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def make_batch(num_graphs, atom_dims, bond_dims):
    sizes = torch.randint(10, 40, (num_graphs,))
    ptr = torch.zeros(num_graphs + 1, dtype=torch.long)
    ptr[1:] = sizes.cumsum(0)
    n = int(ptr[-1])
    batch = torch.repeat_interleave(torch.arange(num_graphs), sizes)
    n_bonds = (sizes.float() * 1.1).long()
    e_graph = torch.repeat_interleave(torch.arange(num_graphs), n_bonds)
    a = ptr[e_graph] + (torch.rand(e_graph.numel()) * sizes[e_graph]).long()
    b = ptr[e_graph] + (torch.rand(e_graph.numel()) * sizes[e_graph]).long()
    edge_index = torch.stack([torch.cat([a, b]), torch.cat([b, a])])
    x = torch.stack([torch.randint(0, d, (n,)) for d in atom_dims], 1)
    bond = torch.stack([torch.randint(0, d, (a.numel(),)) for d in bond_dims], 1).repeat(2, 1)
    y = torch.randint(0, 2, (num_graphs, 1)).float()
    out = [edge_index, batch, x, bond, y]
    if device == "cuda":
        out = [t.pin_memory().to(device, non_blocking=True) for t in out]
    return out


class FeatureEncoder(nn.Module):
    def __init__(self, dims, emb):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(d, emb) for d in dims)
        for e in self.embs:
            nn.init.xavier_uniform_(e.weight)

    def forward(self, feats):
        out = 0
        for i, e in enumerate(self.embs):
            out = out + e(feats[:, i])
        return out


class GINEConv(nn.Module):
    def __init__(self, emb, bond_dims):
        super().__init__()
        self.bond = FeatureEncoder(bond_dims, emb)
        self.eps = nn.Parameter(torch.zeros(1))
        self.mlp = nn.Sequential(
            nn.Linear(emb, 2 * emb), nn.BatchNorm1d(2 * emb), nn.ReLU(), nn.Linear(2 * emb, emb)
        )

    def forward(self, h, edge_index, bond):
        src, dst = edge_index
        msg = F.relu(h[src] + self.bond(bond))
        agg = torch.zeros_like(h).index_add_(0, dst, msg.to(h.dtype))
        return self.mlp((1 + self.eps) * h + agg)


class GINVirtual(nn.Module):
    def __init__(self, layers, emb, atom_dims, bond_dims, virtual=True, pool="mean"):
        super().__init__()
        self.atom = FeatureEncoder(atom_dims, emb)
        self.convs = nn.ModuleList(GINEConv(emb, bond_dims) for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(emb) for _ in range(layers))
        self.virtual = virtual
        self.pool = pool
        if virtual:
            self.vn = nn.Embedding(1, emb)
            nn.init.zeros_(self.vn.weight)
            self.vn_mlps = nn.ModuleList(
                nn.Sequential(
                    nn.Linear(emb, 2 * emb),
                    nn.BatchNorm1d(2 * emb),
                    nn.ReLU(),
                    nn.Linear(2 * emb, emb),
                    nn.BatchNorm1d(emb),
                    nn.ReLU(),
                )
                for _ in range(layers - 1)
            )
        self.head = nn.Linear(emb, 1)

    def forward(self, x, edge_index, bond, batch, num_graphs):
        h = self.atom(x)
        if self.virtual:
            vn = self.vn.weight.expand(num_graphs, -1)
        for i, conv in enumerate(self.convs):
            if self.virtual:
                h = h + vn[batch]
            h_new = self.norms[i](conv(h, edge_index, bond))
            if i < len(self.convs) - 1:
                h_new = F.relu(h_new)
            h_new = F.dropout(h_new, 0.5, self.training)
            if self.virtual and i < len(self.convs) - 1:
                pooled = torch.zeros(num_graphs, h.shape[1], device=h.device, dtype=h.dtype).index_add_(
                    0, batch, h
                )
                vn = F.dropout(self.vn_mlps[i](pooled + vn), 0.5, self.training)
            h = h_new
        idx = batch.unsqueeze(-1).expand_as(h)
        g = torch.zeros(num_graphs, h.shape[1], device=h.device, dtype=h.dtype)
        g = g.scatter_reduce(0, idx, h, reduce=self.pool, include_self=False)
        return self.head(g)


model = GINVirtual(5, EMB, ATOM_DIMS, BOND_DIMS).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"gin-virtual params {sum(p.numel() for p in model.parameters())}")


def train_step():
    edge_index, batch, x, bond, y = make_batch(G, ATOM_DIMS, BOND_DIMS)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = model(x, edge_index, bond, batch, G)
        loss = F.binary_cross_entropy_with_logits(logits.float(), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(STEPS):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
probs = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    for _ in range(EVAL_BATCHES):
        edge_index, batch, x, bond, y = make_batch(G, ATOM_DIMS, BOND_DIMS)
        probs.append(torch.sigmoid(model(x, edge_index, bond, batch, G).float()).cpu())
probs = torch.cat(probs)
print(f"eval graphs {probs.shape[0]} mean prob {probs.mean():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

zinc = GINVirtual(4, 256, [28], [4], virtual=False, pool="sum").to(device)
zopt = torch.optim.SGD(zinc.parameters(), lr=1e-3, momentum=0.9)
zinc.train()
ACCUM = 4
for step in range(2):
    zopt.zero_grad()
    for _ in range(ACCUM):
        edge_index, batch, x, bond, _ = make_batch(ZG, [28], [4])
        target = torch.randn(ZG, 1, device=device)
        loss = F.l1_loss(zinc(x, edge_index, bond, batch, ZG), target) / ACCUM
        loss.backward()
    zopt.step()
    print(f"zinc step {step} loss {loss.item() * ACCUM:.4f}")
if device == "cuda":
    print(f"zinc allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
