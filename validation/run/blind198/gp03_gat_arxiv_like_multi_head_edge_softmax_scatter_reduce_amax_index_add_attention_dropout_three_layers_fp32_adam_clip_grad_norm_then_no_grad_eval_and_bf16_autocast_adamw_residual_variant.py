"""Graph attention network (GAT, Velickovic et al. 2018) on an ogbn-arxiv-like random citation graph,
with the multi-head edge softmax written by hand with scatter_reduce and index_add_ (as PyG's softmax
does, without PyG).

Graph: 169,343 nodes, 1,166,243 random directed edges made undirected, plus self loops (2,501,829 edges
in all), 128 fp32 features, 40 classes, random 50/25/25 % train/val/test split. GAT layer: a linear map
to H heads x C channels; per-node source and destination attention logits (h * att).sum(-1); per edge
leaky_relu(a_src[src] + a_dst[dst], 0.2); the edge softmax over each destination's incoming edges:
the per-destination maximum by scatter_reduce("amax") of the detached logits, exp of the shifted
logits, the sums by index_add_, the division; dropout 0.1 on the attention; messages h[src] * alpha
summed into the destinations with index_add_; heads concatenated (mean in the last layer); bias.
Three layers: 128 -> 4 x 64 -> 4 x 64 -> 4 x 40 averaged over the heads, ELU between, feature
dropout 0.25; fp32, Adam (lr 5e-3) with clip_grad_norm_(1.0).

Phases: the graph and the first training step; 4 more steps; evaluation under no_grad (val and test
accuracy); then a residual GAT variant (linear skip connections, LayerNorm) under bf16 autocast with
AdamW for 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1983)
if SMALL:
    N, E, STEPS = 1000, 6000, 1
else:
    N, E, STEPS = 169_343, 1_166_243, 4
F_IN, HEADS, C, N_CLASSES = 128, 4, 64, 40
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

x = torch.randn(N, F_IN, device=device)
y = torch.randint(0, N_CLASSES, (N,), device=device)
perm = torch.randperm(N, device=device)
train_idx, val_idx, test_idx = perm[: N // 2], perm[N // 2 : 3 * N // 4], perm[3 * N // 4 :]
s = torch.randint(0, N, (E,), device=device)
d = torch.randint(0, N, (E,), device=device)
loops = torch.arange(N, device=device)
src = torch.cat([s, d, loops])
dst = torch.cat([d, s, loops])
del s, d
print(f"graph: {N} nodes, {src.numel()} edges")


def edge_softmax(logits, index, num_nodes):
    """logits (E, H) grouped by index (E,): softmax over each group's edges."""
    heads = logits.shape[1]
    idx = index.unsqueeze(-1).expand(-1, heads)
    m = torch.full((num_nodes, heads), float("-inf"), device=logits.device, dtype=logits.dtype)
    m = m.scatter_reduce(0, idx, logits.detach(), reduce="amax", include_self=True)
    e = (logits - m[index]).exp()
    denom = torch.zeros(num_nodes, heads, device=logits.device, dtype=logits.dtype).index_add_(0, index, e)
    return e / (denom[index] + 1e-16)


class GATLayer(nn.Module):
    def __init__(self, d_in, heads, c, concat=True, dropout=0.1):
        super().__init__()
        self.heads, self.c, self.concat = heads, c, concat
        self.lin = nn.Linear(d_in, heads * c, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, c))
        self.att_dst = nn.Parameter(torch.empty(1, heads, c))
        self.bias = nn.Parameter(torch.zeros(heads * c if concat else c))
        self.dropout = dropout
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, h, src, dst):
        n = h.shape[0]
        h = self.lin(h).view(n, self.heads, self.c)
        a_src = (h * self.att_src).sum(-1)
        a_dst = (h * self.att_dst).sum(-1)
        logits = F.leaky_relu(a_src[src] + a_dst[dst], 0.2)
        alpha = edge_softmax(logits, dst, n)
        alpha = F.dropout(alpha, self.dropout, self.training)
        msg = h[src] * alpha.unsqueeze(-1)
        out = torch.zeros(n, self.heads, self.c, device=h.device, dtype=msg.dtype).index_add_(0, dst, msg)
        out = out.reshape(n, -1) if self.concat else out.mean(1)
        return out + self.bias


class GAT(nn.Module):
    def __init__(self, residual=False):
        super().__init__()
        self.residual = residual
        self.convs = nn.ModuleList(
            [
                GATLayer(F_IN, HEADS, C),
                GATLayer(HEADS * C, HEADS, C),
                GATLayer(HEADS * C, HEADS, N_CLASSES, concat=False),
            ]
        )
        if residual:
            self.skips = nn.ModuleList(
                [nn.Linear(F_IN, HEADS * C), nn.Linear(HEADS * C, HEADS * C), nn.Linear(HEADS * C, N_CLASSES)]
            )
            self.norms = nn.ModuleList([nn.LayerNorm(HEADS * C), nn.LayerNorm(HEADS * C)])

    def forward(self, h, src, dst):
        for i, conv in enumerate(self.convs):
            h = F.dropout(h, 0.25, self.training)
            out = conv(h, src, dst)
            if self.residual:
                out = out + self.skips[i](h)
            if i < len(self.convs) - 1:
                if self.residual:
                    out = self.norms[i](out)
                out = F.elu(out)
            h = out
        return h


model = GAT().to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-3)


def step(m, o, autocast=False):
    m.train()
    o.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        out = m(x, src, dst)
        loss = F.cross_entropy(out[train_idx].float(), y[train_idx])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    o.step()
    return loss.item()


print(f"step 0 loss {step(model, opt):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for _ in range(STEPS):
    loss = step(model, opt)
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    pred = model(x, src, dst).argmax(-1)
    val_acc = (pred[val_idx] == y[val_idx]).float().mean().item()
    test_acc = (pred[test_idx] == y[test_idx]).float().mean().item()
print(f"val acc {val_acc:.4f} test acc {test_acc:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

res = GAT(residual=True).to(device)
res_opt = torch.optim.AdamW(res.parameters(), lr=2e-3, weight_decay=0.01)
for i in range(3):
    print(f"residual bf16 step {i} loss {step(res, res_opt, autocast=amp):.4f}")
if device == "cuda":
    print(f"residual allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
