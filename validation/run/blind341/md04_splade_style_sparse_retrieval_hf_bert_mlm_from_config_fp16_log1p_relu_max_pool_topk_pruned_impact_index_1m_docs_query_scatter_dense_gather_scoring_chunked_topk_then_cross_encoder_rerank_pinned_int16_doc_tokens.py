"""SPLADE-style learned sparse retrieval served by hand, no training: a BertForMaskedLM from BertConfig (base
size: 768, 12 layers, vocab 30,522, sdpa) in fp16 turns text into vocabulary-sized term weights
(log1p(relu(MLM logits)) times the attention mask, max-pooled over tokens); documents keep their 128 heaviest
terms, queries their 32, so every size is fixed and no shape depends on values.

1. Set-up: the encoder and a 6-layer BertForSequenceClassification(num_labels=1) cross-encoder, both built on
   the host and moved to the GPU (fp16 and bf16), eval(); the collection's token ids (1,000,000 documents x
   192 tokens, int16) stay on the host in pinned memory.
2. Document encoding under inference_mode: 24 batches of 64 documents x 256 tokens (attention masks with 96 to
   256 real tokens), the (64, 256, 30522) fp16 logits pooled to (64, 30522), topk(128) terms written into a
   preallocated impact index of 1,000,000 rows (int32 term ids, fp16 weights; the rows not encoded here are
   filled chunk by chunk as if loaded from disk), then the collection's document frequencies by `index_add_`.
3. Query encoding and scoring: 256 queries of 32 tokens through the same encoder, top-32 terms scattered into
   a dense (256, 30522) fp16 query matrix; per corpus chunk of 65,536 documents and block of 64 queries the
   query weights of every document term are gathered (64 x 65,536 x 128), multiplied by the document weights,
   summed in fp32, and the top 100 merged with the running top 100 (cat + topk).
4. Re-ranking: the 16 best documents per query; their token ids gathered on the host from the pinned store,
   copied with non_blocking=True, concatenated after the query (224 tokens, token_type_ids 0/1) and scored by
   the cross-encoder in bf16, 8 batches of 512 pairs; the candidates re-sorted by the cross-encoder's scores.

Phases: set-up | document encoding + impact index | query encoding + gather scoring | cross-encoder rerank.
4 phases."""

import os

import torch
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34104)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    HID, LAYERS, HEADS, FF, CE_LAYERS = 64, 2, 2, 128, 1
    NDOC, DOC_BATCHES, DB, DLEN, MINLEN, DOC_TOK = 5_000, 2, 4, 32, 12, 24
    NQ, QLEN, QB, CHUNK, FILL, RERANK_BATCH = 16, 8, 8, 1_024, 2_048, 64
else:
    HID, LAYERS, HEADS, FF, CE_LAYERS = 768, 12, 12, 3072, 6
    NDOC, DOC_BATCHES, DB, DLEN, MINLEN, DOC_TOK = 1_000_000, 24, 64, 256, 96, 192
    NQ, QLEN, QB, CHUNK, FILL, RERANK_BATCH = 256, 32, 64, 65_536, 131_072, 512
V, DOC_TERMS, Q_TERMS, TOPK, RERANK = 30522, 128, 32, 100, 16


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


enc_config = BertConfig(
    vocab_size=V,
    hidden_size=HID,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FF,
    max_position_embeddings=512,
)
encoder = BertForMaskedLM(enc_config).to(device, torch.float16 if device == "cuda" else torch.float32).eval()
ce_config = BertConfig(
    vocab_size=V,
    hidden_size=HID,
    num_hidden_layers=CE_LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FF,
    max_position_embeddings=512,
    num_labels=1,
)
cross = BertForSequenceClassification(ce_config).to(
    device, torch.bfloat16 if device == "cuda" else torch.float32
)
cross.eval()
doc_tokens = torch.randint(1000, V, (NDOC, DOC_TOK), dtype=torch.int16)
if device == "cuda":
    doc_tokens = doc_tokens.pin_memory()
report("encoder, cross-encoder, pinned token store")


def splade(ids, mask):
    logits = encoder(input_ids=ids, attention_mask=mask).logits
    weights = torch.log1p(torch.relu(logits)) * mask.unsqueeze(-1)
    return weights.amax(dim=1)


def batch(n, length, min_len):
    ids = torch.randint(1000, V, (n, length), device=device)
    ids[:, 0] = 101
    lens = torch.randint(min_len, length + 1, (n,), device=device)
    mask = (torch.arange(length, device=device) < lens.unsqueeze(1)).long()
    return ids * mask, mask


doc_terms = torch.empty(NDOC, DOC_TERMS, dtype=torch.int32, device=device)
doc_weights = torch.empty(NDOC, DOC_TERMS, dtype=torch.float16, device=device)
with torch.inference_mode():
    nnz = []
    for b in range(DOC_BATCHES):
        ids, mask = batch(DB, DLEN, MINLEN)
        rep = splade(ids, mask)
        nnz.append((rep > 0).sum(-1).float().mean())
        w, t = rep.topk(DOC_TERMS, dim=1)
        doc_terms[b * DB : (b + 1) * DB] = t.int()
        doc_weights[b * DB : (b + 1) * DB] = w.half()
        del rep, w, t
    encoded = DOC_BATCHES * DB
    for start in range(encoded, NDOC, FILL):
        stop = min(start + FILL, NDOC)
        doc_terms[start:stop] = torch.randint(
            999, V, (stop - start, DOC_TERMS), device=device, dtype=torch.int32
        )
        doc_weights[start:stop] = torch.rand(stop - start, DOC_TERMS, device=device).half() * 3
    df = torch.zeros(V, device=device).index_add_(
        0, doc_terms.view(-1), torch.ones(NDOC * DOC_TERMS, device=device)
    )
    top_df = df.topk(10).indices.tolist()
print(f"doc terms > 0 per document: {torch.stack(nnz).mean().item():.0f}", "most frequent terms", top_df[:3])
report("document encoding and impact index")

with torch.inference_mode():
    qids, qmask = batch(NQ, QLEN, QLEN // 2)
    qrep = splade(qids, qmask)
    qw, qt = qrep.topk(Q_TERMS, dim=1)
    q_dense = torch.zeros(NQ, V, dtype=torch.float16, device=device).scatter_(1, qt, qw.half())
    del qrep, qw, qt
    best_s = torch.full((NQ, TOPK), float("-inf"), device=device)
    best_i = torch.zeros(NQ, TOPK, dtype=torch.long, device=device)
    for start in range(0, NDOC, CHUNK):
        stop = min(start + CHUNK, NDOC)
        terms = doc_terms[start:stop].long().view(-1)
        weights = doc_weights[start:stop]
        for q0 in range(0, NQ, QB):
            q1 = q0 + QB
            gathered = q_dense[q0:q1, terms].view(q1 - q0, stop - start, DOC_TERMS)
            scores = (gathered * weights).sum(-1, dtype=torch.float32)
            s, i = scores.topk(TOPK, dim=1)
            both_s = torch.cat([best_s[q0:q1], s], 1)
            both_i = torch.cat([best_i[q0:q1], i + start], 1)
            top_s, pos = both_s.topk(TOPK, dim=1)
            best_s[q0:q1] = top_s
            best_i[q0:q1] = both_i.gather(1, pos)
            del gathered, scores, s, i, both_s, both_i, top_s, pos
        del terms, weights
print("sparse retrieval candidates", tuple(best_i.shape))
report("query encoding and gather scoring")

with torch.inference_mode():
    cand = best_i[:, :RERANK].cpu()
    docs = doc_tokens[cand.reshape(-1)].to(device, non_blocking=True).long()
    qrep_ids = qids.repeat_interleave(RERANK, dim=0)
    qrep_mask = qmask.repeat_interleave(RERANK, dim=0)
    pair_ids = torch.cat([qrep_ids, docs], 1)
    pair_mask = torch.cat([qrep_mask, torch.ones_like(docs)], 1)
    pair_types = torch.cat([torch.zeros_like(qrep_ids), torch.ones_like(docs)], 1)
    ce = []
    for s in range(0, pair_ids.shape[0], RERANK_BATCH):
        sl = slice(s, s + RERANK_BATCH)
        ce.append(
            cross(input_ids=pair_ids[sl], attention_mask=pair_mask[sl], token_type_ids=pair_types[sl]).logits
        )
    ce = torch.cat(ce).float().view(NQ, RERANK)
    order = ce.argsort(dim=1, descending=True)
    reranked = best_i[:, :RERANK].gather(1, order)
print("reranked", tuple(reranked.shape))
report("cross-encoder rerank")
