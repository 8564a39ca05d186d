"""CTR prediction with an AutoInt + FiBiNET hybrid over 29 fields, written by hand.

Fields: 26 single-valued categorical fields (vocabularies 1,000,000 down to 1,000; 3.2 M rows in one
offset nn.Embedding of 16, sparse=True) and 3 multi-hot fields through nn.EmbeddingBag (100,000 rows
each, sparse=True; two mode="mean", one mode="sum" with per_sample_weights), bags of 1 to 20 ids with
offsets. Batches are drawn on the host (skewed ids: rand**3), pinned and copied non_blocking.

Model: FiBiNET's SENET (mean-squeeze over the embedding, 29 -> 10 -> 29 excitation) and its
"field-each" bilinear interaction (v_i W_i * v_j for all 406 pairs, gathered by index tensors) on both
the raw and the re-weighted embeddings; AutoInt's interacting layers (3 x nn.MultiheadAttention over the
fields, 2 heads of 32, batch_first, residual projections, ReLU); everything flattened into an MLP
1024-512-256 -> 1 logit, BCEWithLogits.

Training: batch 16,384, fp32; SparseAdam on the embedding tables (sparse gradients) beside fused Adam on
the dense parameters.

Phases: the first step; 3 more steps; inference_mode evaluation of 65,536 rows in chunks of 16,384 with a
rank-based AUC (argsort of the scores); then the model and optimizers deleted, empty_cache(), a new model
with dense-gradient tables (sparse=False) trained 3 steps under bf16 autocast with foreach Adagrad on the
tables beside fused AdamW. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2134)
if SMALL:
    VOCABS = [1000, 500, 200] + [50] * 23
    BAG_VOCAB, BATCH, N_TEST, CHUNK = 1000, 256, 1024, 512
else:
    VOCABS = [1_000_000, 700_000, 400_000, 300_000, 200_000, 150_000, 100_000, 100_000] + [
        50_000 - 2_700 * i for i in range(18)
    ]
    BAG_VOCAB, BATCH, N_TEST, CHUNK = 100_000, 16_384, 65_536, 16_384
N_SINGLE, N_BAGS, D = len(VOCABS), 3, 16
N_FIELDS = N_SINGLE + N_BAGS
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


field_offsets = torch.tensor([0] + VOCABS[:-1]).cumsum(0)
pairs_i, pairs_j = torch.triu_indices(N_FIELDS, N_FIELDS, offset=1)


class CTRNet(nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.table = nn.Embedding(sum(VOCABS), D, sparse=sparse)
        self.bags = nn.ModuleList(
            [nn.EmbeddingBag(BAG_VOCAB, D, mode=m, sparse=sparse) for m in ("mean", "mean", "sum")]
        )
        for t in [self.table, *self.bags]:
            nn.init.normal_(t.weight, std=0.01)
        self.register_buffer("field_offsets", field_offsets.clone(), persistent=False)
        self.register_buffer("pi", pairs_i.clone(), persistent=False)
        self.register_buffer("pj", pairs_j.clone(), persistent=False)
        self.se = nn.Sequential(nn.Linear(N_FIELDS, 10), nn.ReLU(), nn.Linear(10, N_FIELDS), nn.ReLU())
        self.bilinear = nn.Parameter(torch.randn(N_FIELDS, D, D) * D**-0.5)
        self.attn_in = nn.Linear(D, 64)
        self.attn = nn.ModuleList([nn.MultiheadAttention(64, 2, batch_first=True) for _ in range(3)])
        n_pairs = len(pairs_i)
        self.mlp = nn.Sequential(
            nn.Linear(2 * n_pairs * D + N_FIELDS * 64, 1024),
            nn.ReLU(),
            nn.Linear(1024, 512),
            nn.ReLU(),
            nn.Linear(512, 256),
            nn.ReLU(),
            nn.Linear(256, 1),
        )

    def interact(self, v):
        vw = torch.einsum("bfd,fde->bfe", v, self.bilinear)
        return (vw[:, self.pi] * v[:, self.pj]).flatten(1)

    def forward(self, ids, bags):
        v = [self.table(ids + self.field_offsets)]
        for bag, (values, offsets, weights) in zip(self.bags, bags):
            v.append(bag(values, offsets, per_sample_weights=weights).unsqueeze(1))
        v = torch.cat(v, dim=1)
        a = self.se(v.mean(-1))
        v_se = v * a.unsqueeze(-1)
        h = self.attn_in(v)
        for mha in self.attn:
            h = F.relu(h + mha(h, h, h, need_weights=False)[0])
        z = torch.cat([self.interact(v), self.interact(v_se), h.flatten(1)], dim=1)
        return self.mlp(z).squeeze(-1)


def host_batch(n):
    u = torch.rand(n, N_SINGLE) ** 3
    ids = (u * torch.tensor(VOCABS, dtype=torch.float)).long()
    bags = []
    for k in range(N_BAGS):
        lengths = torch.randint(1, 21, (n,))
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
        values = (torch.rand(int(lengths.sum())) ** 3 * BAG_VOCAB).long()
        weights = torch.rand(len(values)) if k == 2 else None
        bags.append((values, offsets, weights))
    label = (ids[:, 0] % 7 == 0).float()
    return ids, bags, label


def to_device(batch):
    ids, bags, label = batch
    pin = device == "cuda"

    def mv(t):
        return None if t is None else (t.pin_memory() if pin else t).to(device, non_blocking=True)

    return mv(ids), [(mv(v), mv(o), mv(w)) for v, o, w in bags], mv(label)


def table_params(m):
    return [m.table.weight] + [b.weight for b in m.bags]


def dense_params(m):
    tables = {id(p) for p in table_params(m)}
    return [p for p in m.parameters() if id(p) not in tables]


model = CTRNet(sparse=True).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
sparse_opt = torch.optim.SparseAdam(table_params(model), lr=1e-3)
dense_opt = torch.optim.Adam(dense_params(model), lr=1e-3, fused=amp)


def train_step(m, opts, use_amp):
    ids, bags, label = to_device(host_batch(BATCH))
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
        logits = m(ids, bags)
    loss = F.binary_cross_entropy_with_logits(logits.float(), label)
    loss.backward()
    for o in opts:
        o.step()
        o.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {train_step(model, [sparse_opt, dense_opt], False):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(model, [sparse_opt, dense_opt], False)
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode():
    scores, labels = [], []
    for i in range(0, N_TEST, CHUNK):
        ids, bags, label = to_device(host_batch(CHUNK))
        scores.append(torch.sigmoid(model(ids, bags)))
        labels.append(label)
    scores, labels = torch.cat(scores), torch.cat(labels)
    ranks = torch.empty_like(scores)
    ranks[scores.argsort()] = torch.arange(1, N_TEST + 1, device=device, dtype=scores.dtype)
    n_pos = labels.sum()
    auc = (ranks * labels).sum() - n_pos * (n_pos + 1) / 2
    auc = auc / (n_pos * (N_TEST - n_pos))
    print(f"test auc {auc.item():.4f}")
    del scores, labels, ranks
report("eval")

del model, sparse_opt, dense_opt
torch.cuda.empty_cache()
model = CTRNet(sparse=False).to(device)
model.train()
table_opt = torch.optim.Adagrad(table_params(model), lr=1e-2, foreach=True)
dense_opt = torch.optim.AdamW(dense_params(model), lr=1e-3, weight_decay=1e-4, fused=amp)
for step in range(3):
    print(f"dense-grad bf16 step {step} loss {train_step(model, [table_opt, dense_opt], amp):.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
