"""Deep Interest Network (Zhou et al. 2018) for click-through rate prediction, sparse embedding gradients.

Embeddings: items nn.Embedding(4,000,000, 64, padding_idx=0, sparse=True), categories nn.Embedding(20,000, 64,
padding_idx=0, sparse=True), the user id hashed into nn.Embedding(1,000,003, 32, sparse=True), gender and age
bucket in small dense embeddings (16 each). A behaviour or a candidate is its item and category vectors
concatenated (128).

Target attention (the paper's activation unit): the candidate repeated over the user's 200 past behaviours
(right-padded, lengths 5 to 200 drawn on the host), [q, k, q - k, q * k] (512) through an MLP 512-80-40-1 with
Dice activations (hand-written: a BatchNorm1d without affine parameters, eps 1e-9, and a learned alpha per
unit), the weights zeroed on padding and NOT normalised by softmax, the weighted sum of behaviours the user's
interest. Head: [user 64, interest 128, candidate 128, mean of behaviours 128] -> 200 -> 80 (Dice) -> 2,
cross-entropy on click / no click.

Batches are made on the host as a data loader would (pinned, non_blocking copies), batch 2,048. fp32;
torch.optim.SparseAdam (lr 1e-3) over the three sparse tables beside torch.optim.Adam (lr 1e-3) over the
rest.

Phases: the first step; 5 more steps; evaluation under no_grad over two batches of 8,192 (accuracy and mean
predicted CTR); 3 steps of the DIN variant whose attention scores are masked with -inf and normalised by a
softmax over the history, under bf16 autocast. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(20105)
if SMALL:
    N_ITEMS, N_CATS, N_USERS, HIST, B, EVAL_B, STEPS = 5000, 100, 1009, 12, 32, 64, 1
else:
    N_ITEMS, N_CATS, N_USERS, HIST, B, EVAL_B, STEPS = 4_000_000, 20_000, 1_000_003, 200, 2048, 8192, 5
D = 64
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        stats = torch.cuda.memory_stats()
        print(
            f"{tag}: max_memory_allocated {stats['allocated_bytes.all.peak']}",
            f"memory_reserved {stats['reserved_bytes.all.current']}",
        )
        torch.cuda.reset_peak_memory_stats()


class Dice(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bn = nn.BatchNorm1d(n, eps=1e-9, affine=False)
        self.alpha = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        p = torch.sigmoid(self.bn(x2))
        return (p * x2 + (1 - p) * self.alpha * x2).view(shape)


class DIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.item = nn.Embedding(N_ITEMS, D, padding_idx=0, sparse=True)
        self.cat = nn.Embedding(N_CATS, D, padding_idx=0, sparse=True)
        self.user = nn.Embedding(N_USERS, 32, sparse=True)
        self.gender = nn.Embedding(3, 16)
        self.age = nn.Embedding(10, 16)
        self.att = nn.Sequential(
            nn.Linear(8 * D, 80), Dice(80), nn.Linear(80, 40), Dice(40), nn.Linear(40, 1)
        )
        self.head = nn.Sequential(
            nn.Linear(64 + 6 * D, 200), Dice(200), nn.Linear(200, 80), Dice(80), nn.Linear(80, 2)
        )

    def forward(self, user, gender, age, hist_items, hist_cats, cand_item, cand_cat, softmax_attention=False):
        keys = torch.cat([self.item(hist_items), self.cat(hist_cats)], -1)
        q = torch.cat([self.item(cand_item), self.cat(cand_cat)], -1)
        mask = hist_items != 0
        qe = q.unsqueeze(1).expand_as(keys)
        scores = self.att(torch.cat([qe, keys, qe - keys, qe * keys], -1)).squeeze(-1)
        if softmax_attention:
            w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        else:
            w = scores * mask
        interest = (w.unsqueeze(-1) * keys).sum(1)
        mean_hist = (keys * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        u = torch.cat([self.user(user), self.gender(gender), self.age(age)], -1)
        return self.head(torch.cat([u, interest, q, mean_hist], -1))


def host_batch(b):
    lengths = torch.randint(5, HIST + 1, (b, 1))
    valid = torch.arange(HIST) < lengths
    hist_items = torch.randint(1, N_ITEMS, (b, HIST)) * valid
    hist_cats = torch.randint(1, N_CATS, (b, HIST)) * valid
    batch = (
        torch.randint(0, 2**40, (b,)) % N_USERS,
        torch.randint(0, 3, (b,)),
        torch.randint(0, 10, (b,)),
        hist_items,
        hist_cats,
        torch.randint(1, N_ITEMS, (b,)),
        torch.randint(1, N_CATS, (b,)),
        (torch.rand(b) < 0.3).long(),
    )
    if device == "cuda":
        return [t.pin_memory().to(device, non_blocking=True) for t in batch]
    return list(batch)


model = DIN().to(device)
sparse_params = [model.item.weight, model.cat.weight, model.user.weight]
sparse_ids = {id(p) for p in sparse_params}
dense_params = [p for p in model.parameters() if id(p) not in sparse_ids]
sparse_opt = torch.optim.SparseAdam(sparse_params, lr=1e-3)
dense_opt = torch.optim.Adam(dense_params, lr=1e-3)
print(f"DIN: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")


def step(softmax_attention=False):
    *x, y = host_batch(B)
    sparse_opt.zero_grad(set_to_none=True)
    dense_opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=softmax_attention and amp):
        logits = model(*x, softmax_attention=softmax_attention)
    loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    sparse_opt.step()
    dense_opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {step():.4f}")
report("first step")
for _ in range(STEPS):
    loss = step()
print(f"step {STEPS} loss {loss:.4f}")
report("train")

model.eval()
correct, ctr = 0, 0.0
with torch.no_grad():
    for _ in range(2):
        *x, y = host_batch(EVAL_B)
        prob = torch.softmax(model(*x), -1)[:, 1]
        correct += ((prob > 0.5).long() == y).sum().item()
        ctr += prob.sum().item()
print(f"eval accuracy {correct / (2 * EVAL_B):.4f} mean ctr {ctr / (2 * EVAL_B):.4f}")
report("eval")

model.train()
for s in range(3):
    loss = step(softmax_attention=True)
    print(f"softmax attention step {s} loss {loss:.4f}")
if device == "cuda":
    print(f"allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
