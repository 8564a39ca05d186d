"""Link prediction on an ogbl-collab/citation2-like random graph: a GCN encoder over a sparse CSR
adjacency with learnable node embeddings, uniform negative sampling and a dot-product decoder, written
without PyG.

Graph: 300,000 nodes, 2,000,000 random undirected training edges (both directions) plus self loops, the
symmetric normalisation D^-1/2 (A + I) D^-1/2 by hand, the COO matrix coalesced and converted with
to_sparse_csr(); a further 100,000 held-out edges for evaluation. Encoder: an nn.Embedding(300,000, 128)
of learnable node features concatenated with 64 fixed random node features, three GCN layers 192 -> 256
-> 256 -> 256 (linear, then torch.sparse.mm with the CSR adjacency, bias, ReLU and dropout 0.3 between).
Each step: the full-graph encoder, 65,536 positive training edges and as many uniformly sampled negative
pairs, the dot-product decoder (h[u] * h[v]).sum(-1), binary_cross_entropy_with_logits; fp32, Adam (lr
1e-3).

Phases: building the graph and the first step; 5 more steps; evaluation under torch.inference_mode: the
node embeddings once, then each held-out edge ranked against 500 random negative targets (the scores of
(chunk, 500) candidates by a batched matmul, chunks of 10,000 edges), the MRR and Hits@50; then a
Hadamard MLP decoder (h[u] * h[v] -> 256 -> 256 -> 1) trained with the same encoder under bf16 autocast with
AdamW (lr 5e-4) and clip_grad_norm_(1.0), 3 steps at 131,072 positives. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1986)
if SMALL:
    N, E, E_TEST, POS, STEPS, N_NEG, CHUNK = 3000, 20000, 1000, 1024, 1, 50, 500
else:
    N, E, E_TEST, POS, STEPS, N_NEG, CHUNK = 300_000, 2_000_000, 100_000, 65_536, 5, 500, 10_000
EMB, F_FIX, HID = 128, 64, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

fixed_feats = torch.randn(N, F_FIX, device=device)
train_edges = torch.randint(0, N, (2, E), device=device)
test_edges = torch.randint(0, N, (2, E_TEST), device=device)
loops = torch.arange(N, device=device)
row = torch.cat([train_edges[0], train_edges[1], loops])
col = torch.cat([train_edges[1], train_edges[0], loops])
deg = torch.zeros(N, device=device).index_add_(0, row, torch.ones_like(row, dtype=torch.float))
dinv = deg.rsqrt()
adj = (
    torch.sparse_coo_tensor(torch.stack([row, col]), dinv[row] * dinv[col], (N, N)).coalesce().to_sparse_csr()
)
del row, col, deg, dinv
print(f"csr adjacency: {adj._nnz()} nonzeros")


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(N, EMB)
        nn.init.normal_(self.emb.weight, std=0.1)
        dims = [EMB + F_FIX, HID, HID, HID]
        self.lins = nn.ModuleList(nn.Linear(dims[i], dims[i + 1], bias=False) for i in range(3))
        self.biases = nn.ParameterList(nn.Parameter(torch.zeros(dims[i + 1])) for i in range(3))

    def forward(self, a):
        h = torch.cat([self.emb.weight, fixed_feats], 1)
        for i, (lin, b) in enumerate(zip(self.lins, self.biases, strict=True)):
            h = torch.sparse.mm(a, lin(h)) + b
            if i < 2:
                h = F.dropout(F.relu(h), 0.3, self.training)
        return h


def dot_decoder(h, u, v):
    return (h[u] * h[v]).sum(-1)


class MLPDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, HID), nn.ReLU(), nn.Linear(HID, 1)
        )

    def forward(self, h, u, v):
        return self.mlp(h[u] * h[v]).squeeze(-1)


encoder = Encoder().to(device)
opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)


def train_step(enc, decoder, optimizer, n_pos, autocast=False, clip=None, params=None):
    enc.train()
    pick = torch.randint(0, E, (n_pos,), device=device)
    pos = train_edges[:, pick]
    neg = torch.randint(0, N, (2, n_pos), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        h = enc(adj)
        pos_out = decoder(h, pos[0], pos[1])
        neg_out = decoder(h, neg[0], neg[1])
        logits = torch.cat([pos_out, neg_out]).float()
        labels = torch.cat([torch.ones(n_pos, device=device), torch.zeros(n_pos, device=device)])
        loss = F.binary_cross_entropy_with_logits(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(params, clip)
    optimizer.step()
    return loss.item()


print(f"step 0 loss {train_step(encoder, dot_decoder, opt, POS):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(STEPS):
    loss = train_step(encoder, dot_decoder, opt, POS)
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

encoder.eval()
rr, hits = [], []
with torch.inference_mode():
    h = encoder(adj)
    for i in range(0, E_TEST, CHUNK):
        u, v = test_edges[0, i : i + CHUNK], test_edges[1, i : i + CHUNK]
        neg_v = torch.randint(0, N, (u.numel(), N_NEG), device=device)
        pos_score = (h[u] * h[v]).sum(-1, keepdim=True)
        neg_score = torch.bmm(h[neg_v], h[u].unsqueeze(-1)).squeeze(-1)
        rank = 1 + (neg_score >= pos_score).sum(-1)
        rr.append((1.0 / rank.float()).cpu())
        hits.append((rank <= 50).float().cpu())
print(f"mrr {torch.cat(rr).mean():.4f} hits@50 {torch.cat(hits).mean():.4f}")
del h
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

decoder = MLPDecoder().to(device)
params = list(encoder.parameters()) + list(decoder.parameters())
opt2 = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.01)
for i in range(3):
    loss = train_step(encoder, decoder, opt2, 2 * POS, autocast=amp, clip=1.0, params=params)
    print(f"mlp decoder bf16 step {i} loss {loss:.4f}")
if device == "cuda":
    print(f"mlp decoder allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
