"""Word2vec skip-gram with negative sampling: input and output embeddings of a 1,000,000-word
vocabulary at dimension 256 as nn.Embedding(sparse=True), trained with torch.optim.SparseAdam on
batches of 65,536 (center, context) pairs with 15 negatives each drawn with torch.multinomial from a
unigram^0.75 table on the GPU, logsigmoid losses, fp32, 3 steps; then the nearest neighbours of
1,024 query words by cosine similarity against the normalized input table in chunks of 131,072
words (topk 10 per chunk, merged); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11203)
V, DIM, B, NEG, STEPS, Q, CHUNK = (
    (5000, 32, 512, 5, 1, 16, 2048) if SMALL else (1_000_000, 256, 65536, 15, 3, 1024, 131072)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class SGNS(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Embedding(V, DIM, sparse=True)
        self.out = nn.Embedding(V, DIM, sparse=True)
        nn.init.uniform_(self.inp.weight, -0.5 / DIM, 0.5 / DIM)
        nn.init.zeros_(self.out.weight)

    def forward(self, center, context, negatives):
        c = self.inp(center)
        pos = (c * self.out(context)).sum(-1)
        neg = torch.bmm(self.out(negatives), c.unsqueeze(-1)).squeeze(-1)
        return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).mean()


model = SGNS().to(device)
opt = torch.optim.SparseAdam(model.parameters(), lr=1e-3)
freq = (1.0 / torch.arange(1, V + 1, dtype=torch.float32)).to(device)
noise = freq.pow(0.75)
noise /= noise.sum()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(STEPS):
    center = torch.multinomial(freq / freq.sum(), B, replacement=True)
    context = (center + torch.randint(-5, 6, (B,), device=device)).clamp(0, V - 1)
    negatives = torch.multinomial(noise, B * NEG, replacement=True).view(B, NEG)
    loss = model(center, context, negatives)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del center, context, negatives, loss
with torch.no_grad():
    emb = F.normalize(model.inp.weight, dim=1)
    queries = emb[torch.randint(0, V, (Q,), device=device)]
    best_s, best_i = [], []
    for start in range(0, V, CHUNK):
        s, i = (queries @ emb[start : start + CHUNK].T).topk(10, dim=1)
        best_s.append(s)
        best_i.append(i + start)
    s, pick = torch.cat(best_s, 1).topk(10, dim=1)
    neighbours = torch.cat(best_i, 1).gather(1, pick)
if device == "cuda":
    print(
        f"eval {tuple(neighbours.shape)} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
