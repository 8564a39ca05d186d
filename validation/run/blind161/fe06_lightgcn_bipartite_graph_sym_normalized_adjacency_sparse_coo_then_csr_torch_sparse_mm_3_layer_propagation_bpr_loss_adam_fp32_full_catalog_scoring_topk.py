"""LightGCN (He et al. 2020) as its PyTorch ports write it, on a random bipartite interaction graph:
800,000 users and 400,000 items, 12,000,000 random (user, item) interactions; the symmetric
normalised adjacency D^-1/2 A D^-1/2 over the 1,200,000 nodes built on the device from both edge
directions (degrees by bincount, torch.sparse_coo_tensor(...).coalesce()), one nn.Embedding(1,200,000,
64) of fp32 ego embeddings; 3 propagation layers E_{k+1} = torch.sparse.mm(A, E_k) and the layer mean
as the final embedding; the BPR loss over (user, positive item, random negative item) triples with an
L2 penalty on the ego embeddings of the batch. Adam (lr 1e-3), batch 32,768 triples. Two steps with
the adjacency as a COO tensor, then the adjacency converted by to_sparse_csr() (the COO dropped)
and two steps with CSR (each step its own phase); then under no_grad the final embeddings computed
once and all 400,000 items scored for 16,384 users in chunks of 4,096 (matmul, the training
positives of the chunk masked by index_put_ to -inf, topk 20) for recall against a random held-out
item; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16106)
if SMALL:
    NU, NI, NNZ, D, B, NEVAL, CHUNK, K = 300, 200, 3000, 8, 64, 128, 32, 5
else:
    NU, NI, NNZ, D, B, NEVAL, CHUNK, K = 800_000, 400_000, 12_000_000, 64, 32768, 16384, 4096, 20
LAYERS, REG = 3, 1e-4
device = "cuda" if torch.cuda.is_available() else "cpu"


def build_norm_adj(users, items):
    n = NU + NI
    row = torch.cat([users, items + NU])
    col = torch.cat([items + NU, users])
    deg = torch.bincount(row, minlength=n).float()
    d_inv_sqrt = deg.pow(-0.5)
    d_inv_sqrt[torch.isinf(d_inv_sqrt)] = 0.0
    vals = d_inv_sqrt[row] * d_inv_sqrt[col]
    adj = torch.sparse_coo_tensor(torch.stack([row, col]), vals, (n, n))
    return adj.coalesce()


class LightGCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(NU + NI, D)
        nn.init.normal_(self.embedding.weight, std=0.1)

    def propagate(self, adj):
        all_emb = self.embedding.weight
        embs = [all_emb]
        for _ in range(LAYERS):
            all_emb = torch.sparse.mm(adj, all_emb)
            embs.append(all_emb)
        out = torch.stack(embs, dim=1).mean(dim=1)
        return torch.split(out, [NU, NI])

    def bpr_loss(self, adj, u, pos, neg):
        users_emb, items_emb = self.propagate(adj)
        u_e, p_e, n_e = users_emb[u], items_emb[pos], items_emb[neg]
        pos_scores = (u_e * p_e).sum(-1)
        neg_scores = (u_e * n_e).sum(-1)
        ego = self.embedding.weight
        reg = (
            (ego[u].norm(2).pow(2) + ego[NU + pos].norm(2).pow(2) + ego[NU + neg].norm(2).pow(2)) / 2 / len(u)
        )
        return F.softplus(neg_scores - pos_scores).mean() + REG * reg


train_users = torch.randint(0, NU, (NNZ,), device=device)
train_items = torch.randint(0, NI, (NNZ,), device=device)
adj = build_norm_adj(train_users, train_items)
model = LightGCN().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(
        f"graph nnz {adj._nnz()} allocated {torch.cuda.memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def train_step(tag):
    idx = torch.randint(0, NNZ, (B,), device=device)
    u, pos = train_users[idx], train_items[idx]
    neg = torch.randint(0, NI, (B,), device=device)
    loss = model.bpr_loss(adj, u, pos, neg)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"{tag} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
for step in range(2):
    train_step(f"coo step {step}")
adj = adj.to_sparse_csr()
for step in range(2):
    train_step(f"csr step {step}")

model.eval()
hits = 0
with torch.no_grad():
    users_emb, items_emb = model.propagate(adj)
    eval_users = torch.randperm(NU, device=device)[:NEVAL]
    held_out = torch.randint(0, NI, (NEVAL,), device=device)
    for start in range(0, NEVAL, CHUNK):
        batch_users = eval_users[start : start + CHUNK]
        scores = users_emb[batch_users] @ items_emb.T
        # mask the chunk's training positives: rows of the interactions whose user is in the chunk
        pos_of = torch.full((NU,), -1, device=device, dtype=torch.long)
        pos_of[batch_users] = torch.arange(len(batch_users), device=device)
        r = pos_of[train_users]
        keep = r >= 0
        scores.index_put_((r[keep], train_items[keep]), torch.tensor(float("-inf"), device=device))
        top = scores.topk(K, dim=-1).indices
        hits += (top == held_out[start : start + CHUNK, None]).any(-1).sum().item()
if device == "cuda":
    print(
        f"eval recall@{K} {hits / NEVAL:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
