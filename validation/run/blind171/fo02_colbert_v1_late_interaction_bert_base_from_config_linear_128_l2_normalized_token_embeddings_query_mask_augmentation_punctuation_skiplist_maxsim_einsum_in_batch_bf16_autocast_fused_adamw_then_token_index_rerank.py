"""ColBERT (Khattab & Zaharia 2020, stanford-futuredata/ColBERT v1's ColBERT model and training loop) as
its users write it: BertModel from BertConfig at bert-base's size (768 wide, 12 layers, 12 heads,
feed-forward 3,072, vocabulary 30,522; sdpa attention), a Linear 768 -> 128 without bias and
L2-normalized token embeddings. Queries of 32 tokens ([Q] marker, padded with [MASK] tokens and all
attended: query augmentation), documents of 180 tokens with their padding masked and a punctuation
skiplist applied as a 0/1 mask on the token embeddings (ids drawn by a seeded CPU generator). Late
interaction: MaxSim over the token similarities (einsum, max over document tokens, sum over query
tokens). A batch is 32 (query, positive, negative) triples; the loss is v1's pairwise cross entropy
over (positive, negative) plus in-batch negatives (every query against all 64 documents, an einsum
of 32 x 64 x 32 x 180 similarities). bf16 autocast, fused AdamW (lr 3e-6), 4 steps (the first its
own phase); then an index of 2,048 documents' token embeddings in fp16 (the doc tower under
inference_mode, batch 256) and the reranking of 64 queries, each against 1,000 candidates gathered
from the index (index_select) by MaxSim in chunks of 250; 4 phases after the model's."""

import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17102)
if SMALL:
    config = BertConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, QL, DL, DIM, STEPS, NDOC, ENC_B, NQ, CAND, CHUNK = 4, 8, 16, 8, 2, 64, 16, 4, 40, 20
else:
    config = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
    )
    B, QL, DL, DIM, STEPS, NDOC, ENC_B, NQ, CAND, CHUNK = 32, 32, 180, 128, 4, 2048, 256, 64, 1000, 250
config._attn_implementation = "sdpa"
CLS, SEP, MASK, Q_MARK, D_MARK = 101, 102, 103, 1, 2
LOW = 10 if SMALL else 998
PUNCT = (
    torch.tensor([999, 1000, 1010, 1011, 1012, 1025, 1029, 1030]) if not SMALL else torch.tensor([7, 8, 9])
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class ColBERT(torch.nn.Module):
    def __init__(self, config, dim):
        super().__init__()
        self.bert = BertModel(config, add_pooling_layer=False)
        self.linear = torch.nn.Linear(config.hidden_size, dim, bias=False)
        self.skiplist = PUNCT

    def query(self, ids, mask):
        q = self.bert(ids, attention_mask=mask).last_hidden_state
        return F.normalize(self.linear(q), p=2, dim=2)

    def doc(self, ids, mask, keep):
        d = self.bert(ids, attention_mask=mask).last_hidden_state
        d = self.linear(d) * keep.unsqueeze(2).to(d.dtype)
        return F.normalize(d, p=2, dim=2)


model = ColBERT(config, DIM).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-6, fused=device == "cuda")
gen = torch.Generator().manual_seed(17102)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def queries(n):
    lengths = torch.randint(QL // 4, QL // 2 + 1, (n,), generator=gen)
    ids = torch.randint(LOW, config.vocab_size, (n, QL), generator=gen)
    pos = torch.arange(QL)[None, :]
    ids = torch.where(pos < lengths[:, None], ids, torch.full_like(ids, MASK))  # [MASK] augmentation
    ids[:, 0], ids[:, 1] = CLS, Q_MARK
    return ids.to(device), torch.ones_like(ids).to(device)


def docs(n):
    lengths = torch.randint(DL // 3, DL + 1, (n,), generator=gen)
    pos = torch.arange(DL)[None, :]
    mask = (pos < lengths[:, None]).long()
    ids = torch.randint(LOW // 2, config.vocab_size, (n, DL), generator=gen)
    ids[:, 0], ids[:, 1] = CLS, D_MARK
    ids = ids * mask
    keep = mask * (~torch.isin(ids, PUNCT)).long()  # ColBERT's skiplist: punctuation and padding dropped
    return ids.to(device), mask.to(device), keep.to(device)


def maxsim(q, d):
    # q: (nq, QL, dim), d: (nq, nd, DL, dim) -> (nq, nd)
    return torch.einsum("qtd,qnsd->qnts", q, d).max(dim=3).values.sum(dim=2)


model.train()
for step in range(STEPS):
    q_ids, q_mask = queries(B)
    d_ids, d_mask, d_keep = docs(2 * B)  # positives, then negatives
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        Q = model.query(q_ids, q_mask)
        D = model.doc(d_ids, d_mask, d_keep)
        pairs = torch.stack([D[:B], D[B:]], dim=1)  # (B, 2, DL, dim)
        pair_scores = maxsim(Q, pairs)
        sim = torch.einsum("qtd,nsd->qnts", Q, D).max(dim=3).values.sum(dim=2)  # (B, 2B)
        loss = F.cross_entropy(pair_scores.float(), torch.zeros(B, dtype=torch.long, device=device))
        loss = loss + F.cross_entropy(sim.float(), torch.arange(B, device=device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del Q, D, pairs, pair_scores, sim, loss

model.eval()
index = torch.empty(NDOC, DL, DIM, dtype=torch.float16, device=device)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for start in range(0, NDOC, ENC_B):
        ids, mask, keep = docs(ENC_B)
        index[start : start + ENC_B] = model.doc(ids, mask, keep).half()
if device == "cuda":
    print(f"index peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

candidates = torch.randint(0, NDOC, (NQ, CAND), generator=gen).to(device)
best = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    q_ids, q_mask = queries(NQ)
    Q = model.query(q_ids, q_mask).half()
    for i in range(NQ):
        scores = []
        for c in range(0, CAND, CHUNK):
            d = index.index_select(0, candidates[i, c : c + CHUNK])
            scores.append((Q[i : i + 1] @ d.transpose(1, 2)).max(dim=2).values.sum(dim=1))
        scores = torch.cat(scores)
        best.append(candidates[i, scores.topk(10).indices])
best = torch.stack(best)
print(f"reranked {tuple(best.shape)}")
if device == "cuda":
    print(
        f"rerank allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
