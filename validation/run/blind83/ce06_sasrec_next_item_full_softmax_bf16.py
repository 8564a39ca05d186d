"""SASRec sequential recommendation: a 200,000-item embedding (64 wide, padding index 0, shared
with the output layer), learnt positions, 2 causal self-attention blocks (`nn.MultiheadAttention`
with a causal mask), next-item cross-entropy over the full catalogue with padded positions
ignored, under bf16 autocast, Adam, batch 64 x 50, 2 steps; then top-10 recommendations for 1,024
users with their seen items masked out by `scatter_` under inference_mode; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8306)
ITEMS, D, L, B, USERS = (500, 16, 10, 4, 8) if SMALL else (200_000, 64, 50, 64, 1024)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, 1, dropout=0.2, batch_first=True)
        self.ffn = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Dropout(0.2), nn.Linear(D, D))

    def forward(self, x, causal):
        q = self.ln1(x)
        x = x + self.attn(q, x, x, attn_mask=causal, need_weights=False)[0]
        return x + self.ffn(self.ln2(x))


class SASRec(nn.Module):
    def __init__(self):
        super().__init__()
        self.items = nn.Embedding(ITEMS + 1, D, padding_idx=0)
        self.pos = nn.Embedding(L, D)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.ln = nn.LayerNorm(D)
        self.register_buffer("causal", torch.triu(torch.full((L, L), float("-inf")), 1))

    def forward(self, seq):
        x = self.items(seq) * D**0.5 + self.pos.weight
        x = F.dropout(x, 0.2, self.training) * (seq > 0).unsqueeze(-1)
        for block in self.blocks:
            x = block(x, self.causal)
        return self.ln(x)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = SASRec().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    seq = torch.randint(1, ITEMS + 1, (B, L + 1), device=device)
    seq[: B // 2, : L // 3] = 0
    inputs, targets = seq[:, :-1], seq[:, 1:]
    with torch.autocast(device, dtype=torch.bfloat16):
        h = model(inputs)
        logits = h @ model.items.weight.t()
        loss = F.cross_entropy(logits.reshape(-1, ITEMS + 1), targets.reshape(-1), ignore_index=0)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del h, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
history = torch.randint(1, ITEMS + 1, (USERS, L), device=device)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    recs = []
    for users in history.split(256):
        scores = model(users)[:, -1] @ model.items.weight.t()
        scores = scores.float().scatter_(1, users, float("-inf"))
        scores[:, 0] = float("-inf")
        recs.append(scores.topk(10, dim=-1).indices)
    recs = torch.cat(recs)
if device == "cuda":
    print(f"recommend peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
