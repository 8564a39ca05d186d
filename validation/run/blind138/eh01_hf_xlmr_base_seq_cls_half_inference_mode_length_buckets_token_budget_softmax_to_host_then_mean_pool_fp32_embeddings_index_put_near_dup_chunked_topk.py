"""Batch scoring with an HF XLMRobertaForSequenceClassification from an XLMRobertaConfig (base
sizes, 250,002-token vocabulary, 3 labels) cast by `model.half()`, under torch.inference_mode: 6,000
documents of random lengths (8 to 512 tokens, drawn on the host), sorted by length and padded to
buckets of 32/64/128/256/512 tokens with as many rows as a token budget allows (65,536 tokens a
batch: 2,048 rows of 32 down to 128 of 512), the class probabilities by softmax in fp32 moved to the
host; then the same backbone (`model.roberta`) at twice the budget for sentence embeddings: mean
pooling over the attention mask in fp32, `F.normalize`, written by index into a preallocated fp16
matrix in the documents' order; then near-duplicate search: the matrix against itself in chunks of
1,024 rows, the diagonal masked, `topk` 5, a count above a threshold; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13801)
if SMALL:
    config = XLMRobertaConfig(
        vocab_size=500,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        num_labels=3,
    )
    N_DOCS, BUDGET, BUCKETS, CHUNK = 96, 512, (8, 16, 32, 64, 128), 32
else:
    config = XLMRobertaConfig(
        vocab_size=250002,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=514,
        type_vocab_size=1,
        num_labels=3,
    )
    N_DOCS, BUDGET, BUCKETS, CHUNK = 6000, 65536, (32, 64, 128, 256, 512), 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = XLMRobertaForSequenceClassification(config).half().to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gen = torch.Generator().manual_seed(1)
lengths = torch.randint(BUCKETS[0] // 4, BUCKETS[-1] + 1, (N_DOCS,), generator=gen)
lengths = torch.where(torch.rand(N_DOCS, generator=gen) < 0.5, lengths // 4 + 2, lengths)
order = torch.argsort(lengths).tolist()


def batches(budget):
    """(document indices, padded length) in length order, as many rows as the budget allows."""
    i = 0
    while i < N_DOCS:
        L = next(b for b in BUCKETS if b >= int(lengths[order[i]]))
        rows = budget // L
        idx = [j for j in order[i : i + rows] if int(lengths[j]) <= L]
        yield idx, L
        i += len(idx)


def make(idx, L):
    n = torch.tensor([int(lengths[j]) for j in idx])
    ids = torch.randint(5, config.vocab_size, (len(idx), L))
    mask = (torch.arange(L)[None, :] < n[:, None]).long()
    ids = ids.masked_fill(mask == 0, config.pad_token_id)
    ids[:, 0] = 0
    return ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)


probs = torch.empty(N_DOCS, config.num_labels)
with torch.inference_mode():
    for idx, L in batches(BUDGET):
        ids, mask = make(idx, L)
        logits = model(input_ids=ids, attention_mask=mask).logits
        probs[idx] = logits.float().softmax(-1).cpu()
print(f"scored {probs.shape[0]} label 0 share {(probs.argmax(-1) == 0).float().mean():.3f}")
if device == "cuda":
    print(f"score peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

emb = torch.empty(N_DOCS, config.hidden_size, dtype=torch.float16, device=device)
with torch.inference_mode():
    for idx, L in batches(2 * BUDGET):
        ids, mask = make(idx, L)
        h = model.roberta(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).float()
        pooled = (h.float() * m).sum(1) / m.sum(1).clamp(min=1e-9)
        emb[torch.tensor(idx, device=device)] = F.normalize(pooled, dim=-1).half()
        del h, m, pooled
if device == "cuda":
    print(f"embed peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

dups = 0
with torch.inference_mode():
    for s in range(0, N_DOCS, CHUNK):
        sims = emb[s : s + CHUNK] @ emb.t()
        rows = torch.arange(sims.shape[0], device=device)
        sims[rows, rows + s] = -1.0
        top, _ = sims.topk(5, dim=-1)
        dups += int((top[:, 0] > 0.95).sum())
        del sims, rows, top
print(f"near duplicates {dups}")
if device == "cuda":
    print(f"dedup peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
