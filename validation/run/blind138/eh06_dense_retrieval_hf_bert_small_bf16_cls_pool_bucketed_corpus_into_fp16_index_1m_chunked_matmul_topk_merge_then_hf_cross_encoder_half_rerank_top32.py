"""Dense retrieval and reranking as served: a bi-encoder HF BertModel from a BertConfig (BGE-small
sizes: 12 layers of 384, 12 heads, feed-forward 1,536, no pooler) cast by `.to(torch.bfloat16)`;
an index of 1,000,000 x 384 fp16 rows (filled in chunks of 131,072 from normalised `randn`, the
precomputed part), then 8,192 new passages of 32 to 512 tokens encoded into its last rows under
inference_mode (sorted by length, buckets of 128/256/512, 32,768 tokens a batch, CLS pooling,
`F.normalize`, `index_copy_`); 2,048 queries of up to 32 tokens encoded at batch 512 and searched
over the index in chunks of 131,072 rows (fp16 `mm`, `topk` 100 per chunk, the running best
merged by `cat` and `topk` again, indices offset by the chunk); then a cross-encoder
BertForSequenceClassification (BERT-base sizes, one label) cast by `model.half()` rescoring the
top 32 of 256 queries as 8,192 query-passage pairs of 256 tokens at batch 1,024 (token type ids
for the passage), `view` and `sort` per query; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification, BertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13806)
if SMALL:
    bi_cfg = BertConfig(
        vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
    )
    ce_cfg = BertConfig(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=1,
    )
    N_INDEX, CHUNK, N_NEW, BUDGET, BUCKETS = 2048, 512, 64, 256, (16, 32, 64)
    N_Q, QB, LQ, K, N_RR, K_RR, L_RR, RB = 32, 8, 8, 10, 4, 4, 32, 8
else:
    bi_cfg = BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=1536,
    )
    ce_cfg = BertConfig(num_labels=1)
    N_INDEX, CHUNK, N_NEW, BUDGET, BUCKETS = 1_000_000, 131072, 8192, 32768, (128, 256, 512)
    N_Q, QB, LQ, K, N_RR, K_RR, L_RR, RB = 2048, 512, 32, 100, 256, 32, 256, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
encoder = BertModel(bi_cfg, add_pooling_layer=False).to(device).to(torch.bfloat16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def encode(ids, mask):
    h = encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
    return F.normalize(h.float(), dim=-1).half()


def tokens(n, length):
    ids = torch.randint(bi_cfg.vocab_size // 30, bi_cfg.vocab_size, (len(n), length))
    mask = (torch.arange(length)[None, :] < n[:, None]).long()
    ids = ids.masked_fill(mask == 0, 0)
    ids[:, 0] = 2
    return ids.to(device), mask.to(device)


index = torch.empty(N_INDEX, bi_cfg.hidden_size, dtype=torch.float16, device=device)
with torch.inference_mode():
    for s in range(0, N_INDEX - N_NEW, CHUNK):
        e = min(s + CHUNK, N_INDEX - N_NEW)
        index[s:e] = F.normalize(torch.randn(e - s, bi_cfg.hidden_size, device=device), dim=-1)
    lengths, _ = torch.randint(BUCKETS[0] // 4, BUCKETS[-1] + 1, (N_NEW,)).sort()
    i = 0
    while i < N_NEW:
        L = next(b for b in BUCKETS if b >= int(lengths[i]))
        n = lengths[i : i + BUDGET // L]
        n = n[n <= L]
        ids, mask = tokens(n, L)
        rows = torch.arange(N_INDEX - N_NEW + i, N_INDEX - N_NEW + i + len(n), device=device)
        index.index_copy_(0, rows, encode(ids, mask))
        i += len(n)
print(f"index {tuple(index.shape)}")
if device == "cuda":
    print(f"index peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    q = torch.cat([encode(*tokens(torch.randint(4, LQ + 1, (QB,)), LQ)) for _ in range(0, N_Q, QB)])
    best_v = torch.full((N_Q, K), float("-inf"), dtype=torch.float16, device=device)
    best_i = torch.zeros(N_Q, K, dtype=torch.long, device=device)
    for s in range(0, N_INDEX, CHUNK):
        scores = q @ index[s : s + CHUNK].t()
        v, ix = scores.topk(K, dim=-1)
        v, pick = torch.cat([best_v, v], 1).topk(K, dim=-1)
        best_i = torch.cat([best_i, ix + s], 1).gather(1, pick)
        best_v = v
        del scores, ix
print(f"retrieved {tuple(best_i.shape)} top score {best_v[:, 0].mean().item():.3f}")
if device == "cuda":
    print(f"search peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

cross = BertForSequenceClassification(ce_cfg)
cross.half()
cross.to(device).eval()
with torch.inference_mode():
    pairs = N_RR * K_RR
    ids = torch.randint(ce_cfg.vocab_size // 30, ce_cfg.vocab_size, (pairs, L_RR), device=device)
    q_len = torch.randint(8, LQ + 1, (pairs, 1), device=device)
    p_len = torch.randint(L_RR // 2, L_RR + 1, (pairs, 1), device=device)
    pos = torch.arange(L_RR, device=device)[None, :]
    mask = (pos < p_len).long()
    ttype = ((pos >= q_len) & (pos < p_len)).long()
    ids = ids.masked_fill(mask == 0, 0)
    logits = torch.cat(
        [
            cross(
                input_ids=ids[s : s + RB], attention_mask=mask[s : s + RB], token_type_ids=ttype[s : s + RB]
            ).logits
            for s in range(0, pairs, RB)
        ]
    )
    rerank = logits.view(N_RR, K_RR).float().sort(dim=-1, descending=True)
    final = best_i[:N_RR, :K_RR].gather(1, rerank.indices)
print(f"reranked {tuple(final.shape)}")
if device == "cuda":
    print(f"rerank peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
