"""Self-supervised tabular learning with SCARF (Bahri et al.) written by hand: a table of 200,000 rows
with 48 numeric columns and 6 categorical columns (cardinalities 12 to 20,000) kept on the device;
each view corrupts 60% of a row's features by replacing them with the same column's value from a
random other row (the empirical marginal: torch.gather over the table with a random row index per
cell, categorical codes likewise), an encoder of per-column categorical embeddings (nn.Embedding, 16
wide) concatenated with the numeric columns, a 4-layer MLP of 512 units with BatchNorm1d and ReLU, and
a 2-layer projection head to 128; the NT-Xent loss over the 2B views (cosine similarity matrix,
temperature 0.5, the diagonal masked with -inf, cross entropy to the positive). Pretraining: fp32
weights, bf16 autocast, RAdam with decoupled weight decay, batches of 4096, 3 steps. Then
fine-tuning for a binary label: the projection head dropped for a 1-logit classifier, fp16 autocast
with GradScaler (init_scale 1024), AdamW, BCEWithLogits, 3 steps. Then inference under inference_mode
over all rows in chunks of 32768 in eval mode and a rank-based ROC AUC computed on the device
(argsort of the scores, ranks, Mann-Whitney).

Phases: 0 table, model and optimizer built; 1 first pretraining step; 2 two more steps; 3 fine-tuning;
4 chunked inference and AUC."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(3215)
device = "cuda"
ROWS, NUM = 200_000, 48
CARD = [12, 31, 100, 1000, 5000, 20000]


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Encoder(nn.Module):
    def __init__(self, width=512, depth=4, emb=16):
        super().__init__()
        self.embs = nn.ModuleList([nn.Embedding(c, emb) for c in CARD])
        layers, d = [], NUM + emb * len(CARD)
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.BatchNorm1d(width), nn.ReLU()]
            d = width
        self.mlp = nn.Sequential(*layers)

    def forward(self, num, cat):
        parts = [num] + [e(cat[:, i]) for i, e in enumerate(self.embs)]
        return self.mlp(torch.cat(parts, 1))


def corrupt(num, cat, rate=0.6):
    b = num.shape[0]
    rows_n = torch.randint(0, ROWS, (b, NUM), device=device)
    rows_c = torch.randint(0, ROWS, (b, len(CARD)), device=device)
    num_r = torch.gather(table_num, 0, rows_n)
    cat_r = torch.gather(table_cat, 0, rows_c)
    mask_n = torch.rand(b, NUM, device=device) < rate
    mask_c = torch.rand(b, len(CARD), device=device) < rate
    return torch.where(mask_n, num_r, num), torch.where(mask_c, cat_r, cat)


def nt_xent(z1, z2, tau=0.5):
    z = F.normalize(torch.cat([z1, z2]).float(), dim=-1)
    sim = (z @ z.T) / tau
    n = z1.shape[0]
    sim = sim.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return F.cross_entropy(sim, target)


table_num = torch.randn(ROWS, NUM, device=device)
table_cat = torch.stack([torch.randint(0, c, (ROWS,), device=device) for c in CARD], 1)
label = (table_num[:, :4].sum(1) + 0.1 * (table_cat[:, 0] % 3) > 0).float()

encoder = Encoder().to(device)
head = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 128)).to(device)
optimizer = torch.optim.RAdam(
    [*encoder.parameters(), *head.parameters()], lr=1e-3, weight_decay=1e-4, decoupled_weight_decay=True
)
report("built")

B = 4096
encoder.train()
for step in range(3):
    idx = torch.randint(0, ROWS, (B,), device=device)
    num, cat = table_num[idx], table_cat[idx]
    v1, v2 = corrupt(num, cat), corrupt(num, cat)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = nt_xent(head(encoder(*v1)), head(encoder(*v2)))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"pretrain {step} loss {loss.item():.4f}")
    del num, cat, v1, v2, loss
    if step == 0:
        report("pretrain0")
report("pretrain1-2")

del optimizer, head
classifier = nn.Linear(512, 1).to(device)
optimizer = torch.optim.AdamW([*encoder.parameters(), *classifier.parameters()], lr=3e-4)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
for step in range(3):
    idx = torch.randint(0, ROWS, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.float16):
        logit = classifier(encoder(table_num[idx], table_cat[idx])).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logit, label[idx])
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"finetune {step} loss {loss.item():.4f}")
    del logit, loss
report("finetune")

encoder.eval()
scores = []
with torch.inference_mode():
    for start in range(0, ROWS, 32768):
        sl = slice(start, start + 32768)
        scores.append(classifier(encoder(table_num[sl], table_cat[sl])).squeeze(1))
    scores = torch.cat(scores)
    ranks = torch.empty_like(scores)
    ranks[scores.argsort()] = torch.arange(1, ROWS + 1, device=device, dtype=scores.dtype)
    pos = label.sum()
    auc = ((ranks * label).sum() - pos * (pos + 1) / 2) / (pos * (ROWS - pos))
print("auc", f"{auc.item():.4f}", tuple(scores.shape))
del scores, ranks
report("inference")
