"""GraphSAGE (Hamilton et al. 2017) with fixed-fanout neighbour sampling written by hand on the
GPU, as in the ogbn-products baselines without PyG: 1,000,000 nodes whose out-degrees (1 to 60)
come from a seeded host generator, the CSR row pointer by `cumsum` on the host, the column
indices drawn on the GPU, node features held as a 100-wide fp16 table on the GPU, 47 classes.
Each step samples 1,024 seed nodes, then per hop a fixed fanout (15, 10, 5) of neighbours with
replacement by rowptr[v] + floor(rand * deg[v]) gathered from the column array, so every block has
a static size (1,024 -> 15,360 -> 153,600 -> 768,000 nodes); the features of the last hop
gathered by index and upcast; 3 SAGE layers of width 256 (mean of the sampled neighbours by a
`view(-1, fanout, d).mean(1)`, Linear of self plus Linear of the mean, LayerNorm, ReLU, dropout);
fp16 autocast with GradScaler, Adam with amsgrad, 6 steps; then layer-wise inference over all
nodes in chunks of 100,000 (each layer's embeddings of every node written into an fp16 buffer,
neighbours sampled at fanout 10) and the accuracy on a test split; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14103)
N, F_IN, N_CLS = (5000, 16, 5) if SMALL else (1000000, 100, 47)
HID, FANOUTS, BATCH = (32, (3, 2, 2), 64) if SMALL else (256, (15, 10, 5), 1024)
STEPS, CHUNK, INF_FANOUT = (2, 1500, 3) if SMALL else (6, 100000, 10)
device = "cuda" if torch.cuda.is_available() else "cpu"

gen = torch.Generator().manual_seed(1403)
deg_cpu = torch.randint(1, 61, (N,), generator=gen)
rowptr_cpu = torch.zeros(N + 1, dtype=torch.long)
rowptr_cpu[1:] = torch.cumsum(deg_cpu, 0)
n_edges = int(rowptr_cpu[-1])
rowptr = rowptr_cpu.to(device)
deg = deg_cpu.to(device)
col = torch.randint(0, N, (n_edges,), device=device)
feat = torch.randn(N, F_IN, device=device).half()
labels = torch.randint(0, N_CLS, (N,), device=device)
perm = torch.randperm(N, device=device)
train_nodes, test_nodes = perm[: N // 10], perm[N // 10 : N // 10 + N // 20]
if device == "cuda":
    print(
        f"graph edges {n_edges} allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def sample_neighbours(nodes, fanout):
    r = torch.rand(nodes.numel(), fanout, device=nodes.device)
    offs = (r * deg[nodes].unsqueeze(1)).long()
    return col[rowptr[nodes].unsqueeze(1) + offs].flatten()


class SAGELayer(nn.Module):
    def __init__(self, f_in, f_out, last=False):
        super().__init__()
        self.lin_self = nn.Linear(f_in, f_out)
        self.lin_neigh = nn.Linear(f_in, f_out, bias=False)
        self.norm = None if last else nn.LayerNorm(f_out)

    def forward(self, h_self, h_neigh, fanout):
        agg = h_neigh.view(-1, fanout, h_neigh.shape[-1]).mean(1)
        out = self.lin_self(h_self) + self.lin_neigh(agg)
        if self.norm is not None:
            out = F.dropout(F.relu(self.norm(out)), 0.3, self.training)
        return out


class SAGE(nn.Module):
    def __init__(self):
        super().__init__()
        dims = [F_IN] + [HID] * (len(FANOUTS) - 1) + [N_CLS]
        self.layers = nn.ModuleList(
            [SAGELayer(dims[i], dims[i + 1], last=i == len(FANOUTS) - 1) for i in range(len(FANOUTS))]
        )

    def forward(self, blocks):
        # blocks[0] = seeds, blocks[i+1] = sampled neighbours of blocks[i]
        h = [feat[b].float() for b in blocks]
        for depth, layer in enumerate(self.layers):
            n_hops = len(blocks) - 1 - depth
            h = [layer(h[i], h[i + 1], FANOUTS[i]) for i in range(n_hops)]
        return h[0]


model = SAGE().to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-3, amsgrad=True)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    seeds = train_nodes[torch.randint(0, train_nodes.numel(), (BATCH,), device=device)]
    blocks = [seeds]
    for fo in FANOUTS:
        blocks.append(sample_neighbours(blocks[-1], fo))
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        out = model(blocks)
        loss = F.cross_entropy(out, labels[seeds])
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
del out, loss, blocks
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
    h_all = feat
    for layer in model.layers:
        nxt = torch.empty(N, layer.lin_self.out_features, device=device, dtype=torch.float16)
        for start in range(0, N, CHUNK):
            nodes = torch.arange(start, min(start + CHUNK, N), device=device)
            nb = sample_neighbours(nodes, INF_FANOUT)
            nxt[start : start + nodes.numel()] = layer(h_all[nodes].float(), h_all[nb].float(), INF_FANOUT)
        h_all = nxt
    if device == "cuda":
        print(f"layerwise peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    acc = (h_all[test_nodes].float().argmax(-1) == labels[test_nodes]).float().mean().item()
del nxt
if device == "cuda":
    print(
        f"test acc {acc:.4f} allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
