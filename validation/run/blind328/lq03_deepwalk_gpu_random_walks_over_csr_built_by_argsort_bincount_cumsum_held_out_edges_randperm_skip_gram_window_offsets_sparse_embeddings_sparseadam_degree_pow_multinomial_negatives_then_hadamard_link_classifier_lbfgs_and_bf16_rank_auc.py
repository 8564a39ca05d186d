"""DeepWalk (Perozzi et al. 2014) link prediction done entirely on the GPU in plain torch.

A stochastic-block-model-like graph of 200,000 nodes (64 communities) with 1,600,000 undirected edges
drawn by torch.randint (90% inside a community); 5% of the edges are held out by randperm; the rest
become a CSR adjacency (both directions, sorted by argsort of the source, rowptr from bincount +
cumsum). Truncated uniform random walks of fixed length 20 start twice from every node: each step
picks neighbour rowptr[v] + floor(rand * deg(v)) (a node without neighbours stays), written into a
preallocated (walks, 20) tensor.

Phases: CSR and walks; skip-gram with negative sampling (window offsets 1..4 taken as whole shifted
slices of random walk rows, 5 negatives per pair from torch.multinomial over degree^0.75, input and
output nn.Embedding(sparse=True) of 128 dims trained by SparseAdam, one backward over the four
offsets per step, 60 steps of 8,192 walk rows);
link classifier on Hadamard products of the frozen embeddings (held-out edges against as many random
pairs, an nn.Linear fitted by LBFGS with 20 iterations, fp32); bf16 scoring of the held-out edges and
2,000,000 random non-edges in chunks under inference_mode, AUC by a ranking sort. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3283)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N, E, C, DIM, WALK_B, NNEG_EVAL, CH = 2000, 16000, 8, 16, 256, 20000, 4096
else:
    N, E, C, DIM, WALK_B, NNEG_EVAL, CH = 200_000, 1_600_000, 64, 128, 8192, 2_000_000, 262_144
L, WALKS_PER_NODE, WINDOW, NEG = 20, 2, 4, 5


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


# --- graph, held-out edges, CSR, walks ---
comm_size = N // C
src = torch.randint(0, N, (E,), device=device)
inside = torch.rand(E, device=device) < 0.9
same = (src // comm_size) * comm_size + torch.randint(0, comm_size, (E,), device=device)
dst = torch.where(inside, same, torch.randint(0, N, (E,), device=device))
perm = torch.randperm(E, device=device)
n_test = E // 20
test_edges = torch.stack([src[perm[:n_test]], dst[perm[:n_test]]])
train = perm[n_test:]
s_all = torch.cat([src[train], dst[train]])
d_all = torch.cat([dst[train], src[train]])
order = torch.argsort(s_all)
col = d_all[order]
deg = torch.bincount(s_all, minlength=N)
rowptr = torch.zeros(N + 1, dtype=torch.long, device=device)
rowptr[1:] = torch.cumsum(deg, 0)
del s_all, d_all, order, src, dst, inside, same, perm

n_walks = N * WALKS_PER_NODE
walks = torch.empty(n_walks, L, dtype=torch.long, device=device)
cur = torch.arange(N, device=device).repeat(WALKS_PER_NODE)
walks[:, 0] = cur
for step in range(1, L):
    d = deg[cur]
    off = (torch.rand(n_walks, device=device) * d).long()
    nxt = col[(rowptr[cur] + off).clamp(max=col.numel() - 1)]
    cur = torch.where(d > 0, nxt, cur)
    walks[:, step] = cur
print(f"walks {tuple(walks.shape)} mean degree {deg.float().mean().item():.2f}")
report("csr_walks")

# --- skip-gram with negative sampling ---
emb_in = nn.Embedding(N, DIM, sparse=True).to(device)
emb_out = nn.Embedding(N, DIM, sparse=True).to(device)
nn.init.uniform_(emb_in.weight, -0.5 / DIM, 0.5 / DIM)
nn.init.zeros_(emb_out.weight)
opt = torch.optim.SparseAdam(list(emb_in.parameters()) + list(emb_out.parameters()), lr=0.01)
noise = deg.float().pow(0.75)
for it in range(60):
    rows = walks[torch.randint(0, n_walks, (WALK_B,), device=device)]
    loss = 0.0
    for k in range(1, WINDOW + 1):
        centre = rows[:, :-k].reshape(-1)
        ctx = rows[:, k:].reshape(-1)
        negs = torch.multinomial(noise, centre.numel() * NEG, replacement=True).view(-1, NEG)
        h = emb_in(centre)
        pos = (h * emb_out(ctx)).sum(-1)
        neg = torch.bmm(emb_out(negs), h.unsqueeze(-1)).squeeze(-1)
        loss = loss - (F.logsigmoid(pos).mean() + F.logsigmoid(-neg).sum(-1).mean())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"skip-gram loss {loss.item():.4f}")
report("skipgram_sparseadam")

# --- link classifier on Hadamard features ---
z = F.normalize(emb_in.weight.detach(), dim=-1)
neg_train = torch.randint(0, N, (2, n_test), device=device)
feats = torch.cat([z[test_edges[0]] * z[test_edges[1]], z[neg_train[0]] * z[neg_train[1]]])
labels = torch.cat([torch.ones(n_test, device=device), torch.zeros(n_test, device=device)])
clf = nn.Linear(DIM, 1).to(device)
lbfgs = torch.optim.LBFGS(clf.parameters(), lr=1.0, max_iter=20, history_size=10)


def closure():
    lbfgs.zero_grad()
    out = (
        F.binary_cross_entropy_with_logits(clf(feats).squeeze(-1), labels) + 1e-4 * clf.weight.square().sum()
    )
    out.backward()
    return out


clf_loss = lbfgs.step(closure)
print(f"link classifier loss {clf_loss.item():.4f}")
del feats, labels
report("link_classifier_lbfgs")

# --- bf16 scoring and AUC ---
zb = z.to(torch.bfloat16)
clf_b = clf.to(torch.bfloat16)
with torch.inference_mode():
    pos_scores = clf_b(zb[test_edges[0]] * zb[test_edges[1]]).float().squeeze(-1)
    neg_scores = torch.empty(NNEG_EVAL, device=device)
    for s in range(0, NNEG_EVAL, CH):
        pair = torch.randint(0, N, (2, min(CH, NNEG_EVAL - s)), device=device)
        neg_scores[s : s + pair.shape[1]] = clf_b(zb[pair[0]] * zb[pair[1]]).float().squeeze(-1)
    scores = torch.cat([pos_scores, neg_scores])
    ranks = torch.empty_like(scores)
    ranks[scores.argsort()] = torch.arange(1, scores.numel() + 1, device=device, dtype=torch.float)
    auc = (ranks[:n_test].sum() - n_test * (n_test + 1) / 2) / (n_test * NNEG_EVAL)
print(f"link prediction auc {auc.item():.4f}")
report("bf16_scoring_auc")
