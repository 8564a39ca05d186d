"""A message-passing neural network for molecular property regression, hand-written after Gilmer
et al. 2017 over a batch of random graphs held as an edge list: an edge network (an MLP from 16
edge features to a 64 x 64 matrix per edge, applied to the source node's state by bmm), messages
summed onto their destination nodes with index_add_ and divided by in-degree, a GRUCell update
with shared weights for 3 rounds, then a Set2Set readout (an LSTMCell query, attention over each
graph's nodes as a segment softmax: scatter_reduce amax, exp, scatter_add_ of the sums, 3 rounds);
512 graphs of 24 to 40 nodes (sizes from torch.randint on the host), about 4 out-edges per node,
12 targets, fp32, Adam with gradient-norm clipping, 3 steps, then a larger batch under no_grad;
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11301)
G, STEPS, GEVAL = (8, 2, 16) if SMALL else (512, 3, 2048)
D, FE, FN, T, ROUNDS = 64, 16, 32, 12, 3
device = "cuda" if torch.cuda.is_available() else "cpu"


def random_graphs(g):
    sizes = torch.randint(24, 41, (g,))
    n = int(sizes.sum())
    batch = torch.repeat_interleave(torch.arange(g), sizes).to(device)
    starts = (torch.cumsum(sizes, 0) - sizes).repeat_interleave(sizes * 4)
    local = torch.cat([torch.randint(0, int(s), (int(s) * 4,)) for s in sizes])
    src = (torch.arange(n).repeat_interleave(4)).to(device)
    dst = (starts + local).to(device)
    x = torch.randn(n, FN, device=device)
    e = torch.randn(src.numel(), FE, device=device)
    y = torch.randn(g, T, device=device)
    return x, e, src, dst, batch, y


class EdgeNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FE, 128), nn.ReLU(), nn.Linear(128, D * D))

    def forward(self, h, e, src, dst):
        w = self.net(e).view(-1, D, D)
        msg = torch.bmm(w, h[src].unsqueeze(-1)).squeeze(-1)
        agg = torch.zeros_like(h).index_add_(0, dst, msg)
        deg = torch.zeros(h.size(0), device=h.device).index_add_(0, dst, torch.ones_like(dst, dtype=h.dtype))
        return agg / deg.clamp(min=1).unsqueeze(-1)


class Set2Set(nn.Module):
    def __init__(self, steps=3):
        super().__init__()
        self.steps = steps
        self.lstm = nn.LSTMCell(2 * D, D)

    def forward(self, x, batch, g):
        h = x.new_zeros(g, D)
        c = x.new_zeros(g, D)
        q_star = x.new_zeros(g, 2 * D)
        idx = batch.unsqueeze(-1).expand(-1, D)
        for _ in range(self.steps):
            h, c = self.lstm(q_star, (h, c))
            score = (x * h[batch]).sum(-1)
            smax = torch.full((g,), float("-inf"), device=x.device).scatter_reduce(
                0, batch, score, reduce="amax", include_self=True
            )
            a = (score - smax[batch]).exp()
            denom = torch.zeros(g, device=x.device).scatter_add_(0, batch, a)
            a = a / denom[batch]
            r = torch.zeros(g, D, device=x.device).scatter_add_(0, idx, a.unsqueeze(-1) * x)
            q_star = torch.cat([h, r], -1)
        return q_star


class MPNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(FN, D)
        self.message = EdgeNetwork()
        self.update = nn.GRUCell(D, D)
        self.readout = Set2Set()
        self.head = nn.Sequential(nn.Linear(2 * D, 256), nn.ReLU(), nn.Linear(256, T))

    def forward(self, x, e, src, dst, batch, g):
        h = F.relu(self.embed(x))
        for _ in range(ROUNDS):
            h = self.update(F.relu(self.message(h, e, src, dst)), h)
        return self.head(self.readout(h, batch, g))


model = MPNN().to(device)
opt = torch.optim.Adam(model.parameters(), lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    x, e, src, dst, batch, y = random_graphs(G)
    loss = F.mse_loss(model(x, e, src, dst, batch, G), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} edges {src.numel()} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, e, src, dst, batch, y, loss
model.eval()
with torch.no_grad():
    x, e, src, dst, batch, y = random_graphs(GEVAL)
    mae = (model(x, e, src, dst, batch, GEVAL) - y).abs().mean()
if device == "cuda":
    print(
        f"eval mae {mae.item():.3f} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
