"""Two CS224n assignments in torch. (a2) word2vec skip-gram with negative sampling: separate center and
context nn.Embedding tables, a synthetic Zipfian corpus drawn on the GPU with torch.multinomial, windows
of +-4 context words per center, 10 negatives per pair drawn from the unigram distribution raised to 3/4
(torch.multinomial with replacement), scores by bmm, loss -logsigmoid(pos) - sum logsigmoid(-neg), Adam;
then cosine nearest neighbours of 512 query words against the whole normalized table (topk). (a3) the
Chen & Manning neural transition-based dependency parser: 36 word + POS + label feature ids per
configuration looked up in one embedding table and flattened, a hidden layer with the cube activation
(h = (xW + b)^3, as in the paper), dropout 0.5, three transitions (shift, left-arc, right-arc), Adam with
cross-entropy on seeded synthetic configurations; evaluation of the parser in fp16 (model.half()).

Phases: 0 corpus and embeddings built; 1 SGNS training steps; 2 cosine neighbours over the table; 3 parser
training epochs; 4 fp16 parser evaluation (UAS-style accuracy)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3065)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


V, D, WINDOW, K = 50000, 300, 4, 10
ranks = torch.arange(1, V + 1, device=device, dtype=torch.float)
zipf = 1.0 / ranks
corpus = torch.multinomial(zipf / zipf.sum(), 2_000_000, replacement=True)
counts = torch.bincount(corpus, minlength=V).float()
noise = counts.pow(0.75)
noise = noise / noise.sum()


class SkipGram(nn.Module):
    def __init__(self):
        super().__init__()
        self.center = nn.Embedding(V, D)
        self.outside = nn.Embedding(V, D)
        nn.init.uniform_(self.center.weight, -0.5 / D, 0.5 / D)
        nn.init.zeros_(self.outside.weight)

    def forward(self, c, o, neg):
        vc = self.center(c)  # (B, D)
        uo = self.outside(o)  # (B, 2W, D)
        un = self.outside(neg)  # (B, 2W*K, D)
        pos = torch.bmm(uo, vc.unsqueeze(-1)).squeeze(-1)
        negs = torch.bmm(un, vc.unsqueeze(-1)).squeeze(-1)
        return -(F.logsigmoid(pos).sum(-1) + F.logsigmoid(-negs).sum(-1)).mean()


sg = SkipGram().to(device)
opt = torch.optim.Adam(sg.parameters(), lr=1e-3)
offsets = torch.cat([torch.arange(-WINDOW, 0), torch.arange(1, WINDOW + 1)]).to(device)
report("corpus built")

B = 8192
for _step in range(30):
    pos = torch.randint(WINDOW, corpus.numel() - WINDOW, (B,), device=device)
    c = corpus[pos]
    o = corpus[pos.unsqueeze(1) + offsets]
    neg = torch.multinomial(noise, B * 2 * WINDOW * K, replacement=True).view(B, 2 * WINDOW * K)
    loss = sg(c, o, neg)
    opt.zero_grad()
    loss.backward()
    opt.step()
report("skip-gram negative sampling")

with torch.no_grad():
    table = F.normalize(sg.center.weight + sg.outside.weight, dim=-1)
    queries = torch.arange(512, device=device)
    sims = table[queries] @ table.T
    sims[torch.arange(512, device=device), queries] = -1.0
    best = sims.topk(10, dim=-1)
print("neighbours", tuple(best.indices.shape))
del sims, best, table
report("cosine neighbours")

N_W, N_P, N_L = 18, 18, 12
N_FEATS = N_W + N_P + N_L
EMB, HID, N_CLASSES = 50, 200, 3
N_IDS = 20000 + 48 + 40


class ParserModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(N_IDS, EMB)
        self.embed_to_hidden = nn.Linear(N_FEATS * EMB, HID)
        nn.init.xavier_uniform_(self.embed_to_hidden.weight)
        self.dropout = nn.Dropout(0.5)
        self.hidden_to_logits = nn.Linear(HID, N_CLASSES)
        nn.init.xavier_uniform_(self.hidden_to_logits.weight)

    def forward(self, w):
        x = self.embeddings(w).view(w.shape[0], -1)
        h = self.embed_to_hidden(x).pow(3)
        return self.hidden_to_logits(self.dropout(h))


parser = ParserModel().to(device)
popt = torch.optim.Adam(parser.parameters(), lr=5e-4)
n_train = 200_000
feats = torch.cat(
    [
        torch.randint(0, 20000, (n_train, N_W)),
        torch.randint(20000, 20048, (n_train, N_P)),
        torch.randint(20048, N_IDS, (n_train, N_L)),
    ],
    dim=1,
).to(device)
labels = (feats[:, 0] + feats[:, N_W]) % N_CLASSES
batch = 1024
for _epoch in range(2):
    perm = torch.randperm(n_train, device=device)
    for i in range(0, 40 * batch, batch):
        idx = perm[i : i + batch]
        logits = parser(feats[idx])
        loss = F.cross_entropy(logits, labels[idx])
        popt.zero_grad()
        loss.backward()
        popt.step()
report("parser training")

parser.eval().half()
with torch.no_grad():
    correct = torch.zeros((), device=device)
    for i in range(0, 100_000, 8192):
        logits = parser(feats[i : i + 8192])
        correct += (logits.argmax(-1) == labels[i : i + 8192]).sum()
print("UAS-like accuracy", (correct / 100_000).item())
report("fp16 parser eval")
