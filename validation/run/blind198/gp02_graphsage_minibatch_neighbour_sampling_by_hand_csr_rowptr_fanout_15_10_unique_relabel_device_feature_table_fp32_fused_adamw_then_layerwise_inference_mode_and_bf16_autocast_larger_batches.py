"""GraphSAGE trained on mini-batches with neighbour sampling written by hand (no PyG, no DGL), on a
reddit/products-like random graph held on the device.

Graph: 1,000,000 nodes, 10,000,000 random directed edges plus a self loop per node, sorted by source into
CSR form (torch.sort, bincount with minlength, cumsum row pointers); a 1,000,000 x 128 fp32 feature table
and 41 class labels on the device. Sampler: for each mini-batch of 2,048 seed nodes, two hops with
fanouts 15 and 10, each neighbour drawn uniformly with replacement from the CSR row (rowptr + floor(rand
* degree)); the frontier of each hop is relabelled with torch.unique(return_inverse=True), so every hop's
node set has a data-dependent size. Model: two SAGE layers (mean over the fixed fanout by reshaping to
(targets, fanout, dim), lin_l on the mean plus lin_r on the target, 128 -> 256 -> 41, ReLU and dropout
0.5), cross-entropy, fp32, AdamW(fused=True, lr 3e-3, weight decay 1e-4).

Phases: building the CSR graph; the first mini-batch step; 15 more steps; layer-wise inference under
torch.inference_mode over all nodes in chunks of 100,000 targets (each chunk sampling 10 neighbours per
node), the first layer's output for all nodes kept on the device, then the accuracy; then 4 steps at
8,192 seeds under bf16 autocast. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1982)
if SMALL:
    N, E, BATCH, BIG_BATCH, STEPS, CHUNK = 5000, 50000, 64, 128, 1, 1000
else:
    N, E, BATCH, BIG_BATCH, STEPS, CHUNK = 1_000_000, 10_000_000, 2048, 8192, 15, 100_000
F_IN, HID, N_CLASSES = 128, 256, 41
FANOUTS = [15, 10]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


feats = torch.randn(N, F_IN, device=device)
labels = torch.randint(0, N_CLASSES, (N,), device=device)
src = torch.cat([torch.randint(0, N, (E,), device=device), torch.arange(N, device=device)])
dst = torch.cat([torch.randint(0, N, (E,), device=device), torch.arange(N, device=device)])
src, perm = torch.sort(src)
col = dst[perm]
del dst, perm
counts = torch.bincount(src, minlength=N)
rowptr = torch.zeros(N + 1, dtype=torch.long, device=device)
rowptr[1:] = torch.cumsum(counts, 0)
deg = counts
del src
train_idx = torch.randperm(N, device=device)[: N // 10]
print(f"csr graph: {N} nodes, {col.numel()} edges")
report("build")


def sample_neighbors(nodes, fanout):
    d = deg[nodes]
    offs = (torch.rand(nodes.numel(), fanout, device=device) * d.unsqueeze(1)).long()
    return col[rowptr[nodes].unsqueeze(1) + offs]


def sample(seeds):
    """Returns the node ids of every hop (outermost first) and, per hop, the index of each target's
    sampled neighbours into the next hop's node list."""
    layers = [seeds]
    nbr_idx = []
    nodes = seeds
    for fanout in FANOUTS:
        nbrs = sample_neighbors(nodes, fanout)
        all_nodes, inv = torch.unique(torch.cat([nodes, nbrs.flatten()]), return_inverse=True)
        nbr_idx.append(inv[nodes.numel() :].view(nodes.numel(), fanout))
        layers.append(all_nodes)
        # the targets come first in their own list: keep the mapping
        nbr_idx[-1] = (nbr_idx[-1], inv[: nodes.numel()])
        nodes = all_nodes
    return layers, nbr_idx


class SAGELayer(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.lin_l = nn.Linear(d_in, d_out)
        self.lin_r = nn.Linear(d_in, d_out, bias=False)

    def forward(self, h_src, nbr, tgt):
        h_nbr = h_src[nbr.flatten()].view(nbr.shape[0], nbr.shape[1], -1).mean(1)
        return self.lin_l(h_nbr) + self.lin_r(h_src[tgt])


class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([SAGELayer(F_IN, HID), SAGELayer(HID, N_CLASSES)])

    def forward(self, layers, nbr_idx):
        h = feats[layers[-1]]
        # innermost hop first: hop k's targets are layers[k]
        for i, layer in enumerate(self.layers):
            nbr, tgt = nbr_idx[len(nbr_idx) - 1 - i]
            h = layer(h, nbr, tgt)
            if i < len(self.layers) - 1:
                h = F.dropout(F.relu(h), 0.5, self.training)
        return h


model = SAGE().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4, fused=amp)


def train_step(batch, autocast=False):
    seeds = train_idx[torch.randint(0, train_idx.numel(), (batch,), device=device)]
    layers, nbr_idx = sample(seeds)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        out = model(layers, nbr_idx)
        loss = F.cross_entropy(out.float(), labels[seeds])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {train_step(BATCH):.4f}")
report("first step")
for _ in range(STEPS):
    loss = train_step(BATCH)
print(f"step {STEPS} loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode():
    hidden = torch.empty(N, HID, device=device)
    for i in range(0, N, CHUNK):
        nodes = torch.arange(i, min(i + CHUNK, N), device=device)
        nbrs = sample_neighbors(nodes, 10)
        layer = model.layers[0]
        hidden[i : i + nodes.numel()] = F.relu(layer.lin_l(feats[nbrs].mean(1)) + layer.lin_r(feats[nodes]))
    correct = 0
    for i in range(0, N, CHUNK):
        nodes = torch.arange(i, min(i + CHUNK, N), device=device)
        nbrs = sample_neighbors(nodes, 10)
        layer = model.layers[1]
        out = layer.lin_l(hidden[nbrs].mean(1)) + layer.lin_r(hidden[nodes])
        correct += (out.argmax(-1) == labels[nodes]).sum().item()
print(f"layer-wise inference acc {correct / N:.4f}")
del hidden
report("inference")

model.train()
for step in range(4):
    loss = train_step(BIG_BATCH, autocast=amp)
    print(f"bf16 step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"bf16 allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
