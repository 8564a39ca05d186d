"""Word2vec skip-gram with negative sampling as the PyTorch ports of word2vec.c write it: the corpus
pipeline on the host (a Zipf-like corpus of token ids drawn with NumPy, frequent words subsampled
with word2vec's keep probability, a dynamic window of 1..5 per centre word, the (centre, context)
pairs shuffled and cut into batches of 131,072), each batch copied from pinned memory with
non_blocking; input and output embeddings of a 750,000-word vocabulary at dimension 300 as
nn.Embedding(sparse=True), 5 negatives a pair drawn with torch.multinomial from the unigram^0.75
table on the GPU, logsigmoid losses, plain torch.optim.SGD over the sparse gradients with
word2vec's linear learning-rate decay (LambdaLR); fp32, 4 steps; then 2,048 analogies (b - a + c)
against the normalized input table (one 2,048 x 750,000 similarity matrix, topk 10); 6 phases."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15001)
rng = np.random.default_rng(15001)
V, DIM, B, NEG, WINDOW, CORPUS, STEPS, Q = (
    (5000, 32, 2048, 5, 5, 50_000, 2, 64) if SMALL else (750_000, 300, 131_072, 5, 5, 1_200_000, 4, 2048)
)
device = "cuda" if torch.cuda.is_available() else "cpu"

# Zipf counts; subsampling as word2vec.c: keep = (sqrt(f / (t * total)) + 1) * t * total / f.
ranks = np.arange(1, V + 1, dtype=np.float64)
counts = np.floor(1e8 / ranks**1.07) + 5
freq = counts / counts.sum()
corpus = rng.choice(V, size=CORPUS, p=freq)
t = 1e-4
keep_p = (np.sqrt(freq / t) + 1) * t / freq
corpus = corpus[rng.random(CORPUS) < keep_p[corpus]]

# Dynamic window: each centre word sees b in 1..WINDOW words on each side.
b = rng.integers(1, WINDOW + 1, size=len(corpus))
centres, contexts = [], []
for off in range(1, WINDOW + 1):
    ok = b[: len(corpus) - off] >= off
    centres += [corpus[: len(corpus) - off][ok], corpus[off:][ok[: len(corpus) - off]]]
    contexts += [corpus[off:][ok], corpus[: len(corpus) - off][ok]]
centres = np.concatenate(centres)
contexts = np.concatenate(contexts)
perm = rng.permutation(len(centres))
centres, contexts = centres[perm], contexts[perm]
print(f"{len(corpus)} tokens after subsampling, {len(centres)} pairs")


class SkipGram(nn.Module):
    def __init__(self):
        super().__init__()
        self.u = nn.Embedding(V, DIM, sparse=True)
        self.v = nn.Embedding(V, DIM, sparse=True)
        nn.init.uniform_(self.u.weight, -0.5 / DIM, 0.5 / DIM)
        nn.init.zeros_(self.v.weight)

    def forward(self, c, o, neg):
        uc = self.u(c)
        pos = F.logsigmoid((uc * self.v(o)).sum(-1))
        negs = F.logsigmoid(-torch.bmm(self.v(neg), uc.unsqueeze(2)).squeeze(2)).sum(-1)
        return -(pos + negs).mean()


model = SkipGram().to(device)
noise = torch.tensor(counts**0.75, dtype=torch.float32, device=device)
noise /= noise.sum()
opt = torch.optim.SGD(model.parameters(), lr=0.025)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(1e-4, 1 - s / STEPS))
if device == "cuda":
    print(f"tables {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(STEPS):
    lo = step * B
    c = torch.from_numpy(centres[lo : lo + B])
    o = torch.from_numpy(contexts[lo : lo + B])
    if device == "cuda":
        c, o = c.pin_memory(), o.pin_memory()
    c, o = c.to(device, non_blocking=True), o.to(device, non_blocking=True)
    neg = torch.multinomial(noise, B * NEG, replacement=True).view(B, NEG)
    loss = model(c, o, neg)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, c, o, neg
with torch.no_grad():
    emb = F.normalize(model.u.weight, dim=1)
    abc = torch.randint(0, 30_000 if not SMALL else V, (Q, 3), device=device)
    query = F.normalize(emb[abc[:, 1]] - emb[abc[:, 0]] + emb[abc[:, 2]], dim=1)
    sims = query @ emb.t()
    sims.scatter_(1, abc, float("-inf"))
    best = sims.topk(10, dim=1).indices
if device == "cuda":
    print(
        f"analogy {best.shape} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
