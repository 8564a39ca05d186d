"""GRU4Rec (Hidasi & Karatzoglou's session-based recommender, as its official PyTorch port trains it)
over a 400,000-item catalogue, fp32. Session-parallel mini-batches: 512 sessions run side by side, each
step feeds every session's current item and predicts its next one; a `nn.GRUCell` (embedding 256 ->
hidden 512) carries one hidden row per session, detached after every step (backpropagation through one
step, as GRU4Rec does) and zeroed by a 0/1 mask where a session ended and a new one took its slot
(`h = h.detach() * keep`, the ends drawn beforehand on the CPU from a seeded generator). Scores come
from an output embedding (400,000 x 512) and bias gathered only for the 512 in-batch targets plus 2,048
shared negatives, sampled with `torch.multinomial` from popularity^0.75 into a GPU cache of 64 steps that
is refilled when used up; the loss is BPR-max (softmax over the negatives' scores with the diagonal
masked out, a score regulariser). Dense Adagrad over all parameters (so the two big embeddings get
dense gradients and state). Phase 1: 120 steps. Phase 2: evaluation under no_grad, 4 batches of 1,024
sessions run 5 steps each, then every item of the catalogue scored (1,024 x 400,000), the target's rank
counted by comparison with its own score, recall@20 and MRR@20 from `topk`. 2 phases."""

import torch
from torch import nn

torch.manual_seed(2811)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


N_ITEMS, EMB, HID = 400_000, 256, 512
B, N_SAMPLE, CACHE = 512, 2048, 64


class GRU4Rec(nn.Module):
    def __init__(self):
        super().__init__()
        self.E = nn.Embedding(N_ITEMS, EMB)
        self.gru = nn.GRUCell(EMB, HID)
        self.Wy = nn.Embedding(N_ITEMS, HID)
        self.By = nn.Embedding(N_ITEMS, 1)
        self.drop = nn.Dropout(0.1)
        nn.init.uniform_(self.Wy.weight, -0.03, 0.03)
        nn.init.zeros_(self.By.weight)

    def step(self, x, h):
        return self.gru(self.drop(self.E(x)), h)

    def score(self, h, targets):
        return h @ self.Wy(targets).T + self.By(targets).T


def bpr_max(logits, bpreg=1.0):
    # logits: (B, B + S), column i of row i is the positive
    n = logits.shape[0]
    hm = torch.ones_like(logits)
    hm[:, :n].fill_diagonal_(0.0)
    X = logits - logits.max(dim=1, keepdim=True)[0]
    e_x = torch.exp(X) * hm
    soft = e_x / e_x.sum(dim=1, keepdim=True)
    pos = torch.diag(logits).unsqueeze(1)
    loss = -torch.log(torch.sum(torch.sigmoid(pos - logits) * soft, dim=1) + 1e-24)
    return (loss + bpreg * torch.sum(soft * logits**2, dim=1)).mean()


model = GRU4Rec().to(dev)
opt = torch.optim.Adagrad(model.parameters(), lr=0.05)
popularity = torch.rand(N_ITEMS, device=dev) ** 3 * 1000 + 1
P0 = popularity**0.75
gen = torch.Generator().manual_seed(7)
STEPS = 120
ends = torch.rand(STEPS, B, generator=gen) < 0.15  # a session ends and a new one starts in that slot
h = torch.zeros(B, HID, device=dev)
cur = torch.randint(0, N_ITEMS, (B,), device=dev)
cache, used = None, CACHE
for step in range(STEPS):
    if used == CACHE:
        cache = torch.multinomial(P0, CACHE * N_SAMPLE, replacement=True).view(CACHE, N_SAMPLE)
        used = 0
    neg = cache[used]
    used += 1
    nxt = torch.randint(0, N_ITEMS, (B,), device=dev)
    keep = (~ends[step]).float().to(dev, non_blocking=True).unsqueeze(1)
    h = h.detach() * keep
    h = model.step(cur, h)
    logits = model.score(h, torch.cat([nxt, neg]))
    loss = bpr_max(logits)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    cur = nxt
print("train", round(loss.item(), 4))
report("train_session_parallel_bpr_max_adagrad")

del logits, loss, neg
model.eval()
recall, mrr = 0.0, 0.0
with torch.no_grad():
    for _b in range(4):
        hh = torch.zeros(1024, HID, device=dev)
        items = torch.randint(0, N_ITEMS, (6, 1024), device=dev)
        for t in range(5):
            hh = model.step(items[t], hh)
        tgt = items[5]
        scores = hh @ model.Wy.weight.T + model.By.weight.T
        tscore = scores.gather(1, tgt.unsqueeze(1))
        rank = (scores > tscore).sum(dim=1) + 1
        top = scores.topk(20, dim=1).indices
        hit = (top == tgt.unsqueeze(1)).any(dim=1)
        recall += hit.float().mean().item()
        mrr += (
            torch.where(rank <= 20, 1.0 / rank.float(), torch.zeros_like(rank, dtype=torch.float))
            .mean()
            .item()
        )
        del scores, tscore, rank, top
print("recall@20", round(recall / 4, 5), "mrr@20", round(mrr / 4, 6))
report("no_grad_full_catalog_scoring")
