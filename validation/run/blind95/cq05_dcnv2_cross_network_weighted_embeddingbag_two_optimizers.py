"""A DCN-v2 click-through model (Criteo-style: 13 dense features, 26 categorical fields as
multi-hot bags in nn.EmbeddingBag tables of 20,000 to 400,000 rows, dim 64, mode "sum" with
per_sample_weights and include_last_offset, a 3-layer full-rank cross network in parallel with a
1,024-512-256 deep MLP), fp32; BCE-with-logits training with two optimizers (fused SGD for the
tables, fused Adam for the rest), batches of 8,192 built on the host with 1 to 6 ids per bag, 4
steps; then scoring 65,536 rows under torch.inference_mode; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9505)
if SMALL:
    ROWS = [50 + 10 * i for i in range(26)]
    DIM, B, EVAL, MLP = 8, 32, 64, (32, 16)
else:
    ROWS = [20_000 + (i * 37_000) % 380_000 for i in range(26)]
    DIM, B, EVAL, MLP = 64, 8192, 65536, (1024, 512, 256)
DENSE = 13
device = "cuda" if torch.cuda.is_available() else "cpu"


class DCNv2(nn.Module):
    def __init__(self):
        super().__init__()
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(n, DIM, mode="sum", include_last_offset=True) for n in ROWS
        )
        width = DENSE + DIM * len(ROWS)
        self.cross = nn.ModuleList(nn.Linear(width, width) for _ in range(3))
        layers, cin = [], width
        for h in MLP:
            layers += [nn.Linear(cin, h), nn.ReLU()]
            cin = h
        self.deep = nn.Sequential(*layers)
        self.head = nn.Linear(width + cin, 1)

    def forward(self, dense, bags):
        emb = [
            table(ids, offsets, per_sample_weights=w)
            for table, (ids, offsets, w) in zip(self.tables, bags, strict=True)
        ]
        x0 = torch.cat([dense, *emb], dim=1)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        return self.head(torch.cat([x, self.deep(x0)], dim=1)).squeeze(1)


def batch(n):
    # as a data loader would: the bags are built on the host, then copied to the GPU
    dense = torch.log1p(torch.rand(n, DENSE) * 100).to(device)
    bags = []
    for rows in ROWS:
        counts = torch.randint(1, 7, (n,))
        offsets = torch.zeros(n + 1, dtype=torch.long)
        offsets[1:] = counts.cumsum(0)
        total = int(offsets[-1])
        ids = torch.randint(0, rows, (total,))
        weights = torch.rand(total)
        bags.append((ids.to(device), offsets.to(device), weights.to(device)))
    return dense, bags


model = DCNv2().to(device)
fused = device == "cuda"
table_params = list(model.tables.parameters())
table_ids = {id(p) for p in table_params}
opt_tables = torch.optim.SGD(table_params, lr=0.05, fused=fused)
opt_dense = torch.optim.Adam([p for p in model.parameters() if id(p) not in table_ids], lr=1e-3, fused=fused)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    dense, bags = batch(B)
    clicks = (torch.rand(B, device=device) < 0.25).float()
    loss = F.binary_cross_entropy_with_logits(model(dense, bags), clicks)
    loss.backward()
    opt_tables.step()
    opt_dense.step()
    opt_tables.zero_grad(set_to_none=True)
    opt_dense.zero_grad(set_to_none=True)
    del dense, bags, clicks, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
dense, bags = batch(EVAL)
with torch.inference_mode():
    scores = torch.sigmoid(model(dense, bags))
    top = scores.topk(min(100, EVAL)).indices
if device == "cuda":
    print(
        f"score {tuple(scores.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
