"""GATv2 (Brody et al. 2022) on a graph of ogbn-proteins' kind, written by hand over an edge list
the way the DGL/PyG-free ports do: 132,534 nodes with 8-dimensional species features and 112
binary tasks, 1,200,000 random directed edges with 8-dimensional edge features (all made on the
GPU by torch.randint/rand with fixed counts), self loops appended by `torch.cat`; 3 GATv2 layers of
6 heads x 64 channels with the edge features projected into the attention (score =
a . LeakyReLU(W_s x_j + W_d x_i + W_e e_ij)), the edge softmax written out (per-destination
maxima by `scatter_reduce` "amax" with include_self=False, `exp`, the denominators by
`index_add_`, messages x_j * alpha summed by `index_add_` into fp32 zeros), attention dropout,
residual Linear and BatchNorm1d between layers; bf16 autocast with the scores and the softmax in
fp32, the multi-label BCE-with-logits over the training nodes, fused AdamW, clip_grad_norm_ at
1.0, 4 full-graph steps; then the full-graph evaluation under no_grad (per-task ROC proxies by
sigmoid means) and the attention of the last layer kept for the in-degree entropy; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14102)
N, E, F_IN, F_EDGE, TASKS = (3000, 20000, 8, 8, 12) if SMALL else (132534, 1200000, 8, 8, 112)
HEADS, CH, LAYERS = (2, 8, 2) if SMALL else (6, 64, 3)
STEPS = 2 if SMALL else 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class GATv2Layer(nn.Module):
    def __init__(self, f_in, heads, ch, f_edge, attn_drop=0.1):
        super().__init__()
        self.heads, self.ch = heads, ch
        self.lin_src = nn.Linear(f_in, heads * ch)
        self.lin_dst = nn.Linear(f_in, heads * ch)
        self.lin_edge = nn.Linear(f_edge, heads * ch, bias=False)
        self.att = nn.Parameter(torch.randn(1, heads, ch) * ch**-0.5)
        self.res = nn.Linear(f_in, heads * ch, bias=False)
        self.attn_drop = attn_drop

    def forward(self, x, src, dst, edge_attr):
        n = x.shape[0]
        xs = self.lin_src(x).view(n, self.heads, self.ch)
        xd = self.lin_dst(x).view(n, self.heads, self.ch)
        ee = self.lin_edge(edge_attr).view(-1, self.heads, self.ch)
        z = F.leaky_relu(xs[src] + xd[dst] + ee, 0.2)
        score = (z.float() * self.att).sum(-1)
        smax = torch.zeros(n, self.heads, device=x.device).scatter_reduce(
            0, dst.unsqueeze(-1).expand_as(score), score, reduce="amax", include_self=False
        )
        ex = (score - smax[dst]).exp()
        denom = torch.zeros(n, self.heads, device=x.device).index_add_(0, dst, ex)
        alpha = ex / (denom[dst] + 1e-16)
        alpha = F.dropout(alpha, self.attn_drop, self.training)
        msg = xs[src].float() * alpha.unsqueeze(-1)
        out = torch.zeros(n, self.heads, self.ch, device=x.device).index_add_(0, dst, msg)
        return out.flatten(1) + self.res(x), alpha


class GATv2(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(F_IN, HEADS * CH)
        self.layers = nn.ModuleList([GATv2Layer(HEADS * CH, HEADS, CH, F_EDGE) for _ in range(LAYERS)])
        self.norms = nn.ModuleList([nn.BatchNorm1d(HEADS * CH) for _ in range(LAYERS - 1)])
        self.head = nn.Linear(HEADS * CH, TASKS)

    def forward(self, x, src, dst, edge_attr):
        h = F.relu(self.enc(x))
        for i, layer in enumerate(self.layers):
            h, alpha = layer(h, src, dst, edge_attr)
            if i < len(self.norms):
                h = F.dropout(F.relu(self.norms[i](h)), 0.25, self.training)
        return self.head(h), alpha


x = torch.rand(N, F_IN, device=device)
src = torch.cat([torch.randint(0, N, (E,), device=device), torch.arange(N, device=device)])
dst = torch.cat([torch.randint(0, N, (E,), device=device), torch.arange(N, device=device)])
edge_attr = torch.cat([torch.rand(E, F_EDGE, device=device), torch.ones(N, F_EDGE, device=device)])
y = (torch.rand(N, TASKS, device=device) < 0.15).float()
train_idx = torch.randperm(N, device=device)[: int(0.65 * N)]
if device == "cuda":
    print(f"graph allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model = GATv2().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits, _ = model(x, src, dst, edge_attr)
        loss = F.binary_cross_entropy_with_logits(logits[train_idx].float(), y[train_idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
del logits, loss
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
    logits, alpha = model(x, src, dst, edge_attr)
    prob = logits.float().sigmoid()
    pos_mean = (prob * y).sum(0) / y.sum(0).clamp(min=1)
    neg_mean = (prob * (1 - y)).sum(0) / (1 - y).sum(0).clamp(min=1)
    proxy = (pos_mean - neg_mean).mean().item()
if device == "cuda":
    print(
        f"eval proxy {proxy:.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    ent = torch.zeros(N, HEADS, device=device).index_add_(0, dst, -(alpha * (alpha + 1e-12).log()))
    deg = torch.zeros(N, device=device).index_add_(0, dst, torch.ones_like(dst, dtype=torch.float))
    mean_ent = (ent.mean(-1) / deg.clamp(min=1).log().clamp(min=1e-6)).mean().item()
if device == "cuda":
    print(
        f"entropy {mean_ent:.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
