"""A cross-encoder reranker written around HF transformers without a serving framework: a
BertForSequenceClassification from a BertConfig (MiniLM-L12 sizes: 384 hidden, 12 layers, one
relevance logit) in fp16 scores, for 256 queries, the top 100 candidates of a first-stage retriever
(query 8 to 30 tokens, passage 40 to 220, `[CLS] q [SEP] p [SEP]` with token types, built on the host)
in chunks of 4 queries (400 pairs) padded to the chunk's longest pair under torch.inference_mode, the
top 10 per query kept on the host; then the same model exported with `torch.export.export` (dynamic batch
dimension, every pair padded to 256 tokens so the sequence length is static) and the same rerank run
through `exported.module()` under `torch.no_grad`, in chunks of 8 queries; how often the two top-1
choices agree printed; 4 phases."""

import os

import torch
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34602)
if SMALL:
    config = BertConfig(
        vocab_size=500,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
        num_labels=1,
    )
    N_QUERIES, TOP_K, Q_PER_CHUNK, SEQ = 8, 20, 2, 64
    Q_RANGE, P_RANGE = (4, 10), (8, 40)
else:
    config = BertConfig(
        vocab_size=30522,
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
        num_labels=1,
    )
    N_QUERIES, TOP_K, Q_PER_CHUNK, SEQ = 256, 100, 4, 256
    Q_RANGE, P_RANGE = (8, 31), (40, 221)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForSequenceClassification(config).half().to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gen = torch.Generator().manual_seed(3)
q_tok = [
    torch.randint(4, config.vocab_size, (int(n),), generator=gen)
    for n in torch.randint(*Q_RANGE, (N_QUERIES,), generator=gen)
]
p_len = torch.randint(*P_RANGE, (N_QUERIES, TOP_K), generator=gen)


def pairs(qs, length=None):
    """input_ids, token_type_ids, attention_mask of every (query, candidate) pair of queries qs."""
    rows = []
    for q in qs:
        for k in range(TOP_K):
            p = torch.randint(
                4,
                config.vocab_size,
                (int(p_len[q, k]),),
                generator=torch.Generator().manual_seed(q * TOP_K + k),
            )
            rows.append((q_tok[q], p))
    L = length or max(len(a) + len(b) + 3 for a, b in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for r, (a, b) in enumerate(rows):
        seq = torch.cat([torch.tensor([2]), a, torch.tensor([3]), b, torch.tensor([3])])[:L]
        ids[r, : len(seq)] = seq
        types[r, len(a) + 2 : len(seq)] = 1
        mask[r, : len(seq)] = 1
    return ids.to(device), types.to(device), mask.to(device)


def rerank(fn, q_per_chunk, length=None):
    top = torch.empty(N_QUERIES, 10, dtype=torch.long)
    for s in range(0, N_QUERIES, q_per_chunk):
        qs = list(range(s, min(s + q_per_chunk, N_QUERIES)))
        ids, types, mask = pairs(qs, length)
        scores = fn(ids, types, mask).float().view(len(qs), TOP_K)
        top[s : s + len(qs)] = scores.topk(10, dim=-1).indices.cpu()
        del ids, types, mask, scores
    return top


def eager(ids, types, mask):
    return model(input_ids=ids, token_type_ids=types, attention_mask=mask).logits


with torch.inference_mode():
    top_eager = rerank(eager, Q_PER_CHUNK)
print(f"eager rerank {top_eager.shape} first {top_eager[0, :3].tolist()}")
if device == "cuda":
    print(f"eager peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

example = pairs([0, 1], SEQ)
batch = torch.export.Dim("batch", min=2, max=4096)
exported = torch.export.export(
    model,
    (),
    {"input_ids": example[0], "token_type_ids": example[1], "attention_mask": example[2]},
    dynamic_shapes={"input_ids": {0: batch}, "token_type_ids": {0: batch}, "attention_mask": {0: batch}},
)
runner = exported.module()
del example
print(f"exported {len(exported.graph.nodes)} nodes")
if device == "cuda":
    print(f"export peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def run_exported(ids, types, mask):
    return runner(input_ids=ids, token_type_ids=types, attention_mask=mask).logits


with torch.no_grad():
    top_exported = rerank(run_exported, 2 * Q_PER_CHUNK, SEQ)
agree = (top_eager[:, :1] == top_exported[:, :1]).float().mean().item()
print(f"exported rerank top-1 agreement {agree:.3f}")
if device == "cuda":
    print(f"exported peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
