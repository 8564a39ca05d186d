"""Contrastive two-tower retrieval model (query tower: token embedding + masked mean + MLP; item tower: id
embedding + feature MLP), symmetric F.cross_entropy over a batch x batch similarity matrix, learnable
temperature, bf16 autocast, AdamW."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, ITEMS, DIM, OUT, B, QLEN, FEATS = (
    (500, 1000, 32, 16, 8, 12, 8) if os.environ.get("SMOKE") else (250000, 2000000, 256, 128, 4096, 32, 64)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(8)


class QueryTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM, padding_idx=0)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.ReLU(), nn.Linear(4 * DIM, 2 * DIM), nn.ReLU())
        self.out = nn.Linear(2 * DIM, OUT)

    def forward(self, tokens):
        mask = (tokens != 0).unsqueeze(-1).to(torch.float32)
        pooled = (self.emb(tokens) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return F.normalize(self.out(self.mlp(pooled)), dim=-1)


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(ITEMS, DIM)
        self.feat = nn.Sequential(nn.Linear(FEATS, DIM), nn.ReLU())
        self.mlp = nn.Sequential(nn.Linear(2 * DIM, 4 * DIM), nn.ReLU(), nn.Linear(4 * DIM, OUT))

    def forward(self, ids, feats):
        h = torch.cat([self.emb(ids), self.feat(feats)], dim=-1)
        return F.normalize(self.mlp(h), dim=-1)


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = QueryTower()
        self.item = ItemTower()
        self.logit_scale = nn.Parameter(torch.tensor(2.659))

    def forward(self, tokens, ids, feats):
        q = self.query(tokens)
        i = self.item(ids, feats)
        return self.logit_scale.exp().clamp(max=100) * q @ i.t()


model = TwoTower().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    lengths = torch.randint(1, QLEN + 1, (B,), device=device)
    tokens = torch.randint(1, VOCAB, (B, QLEN), device=device)
    tokens = tokens.masked_fill(torch.arange(QLEN, device=device)[None, :] >= lengths[:, None], 0)
    ids = torch.randint(0, ITEMS, (B,), device=device)
    feats = torch.randn(B, FEATS, device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        sim = model(tokens, ids, feats)
    target = torch.arange(B, device=device)
    sim = sim.float()
    loss = (F.cross_entropy(sim, target) + F.cross_entropy(sim.t(), target)) / 2
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
