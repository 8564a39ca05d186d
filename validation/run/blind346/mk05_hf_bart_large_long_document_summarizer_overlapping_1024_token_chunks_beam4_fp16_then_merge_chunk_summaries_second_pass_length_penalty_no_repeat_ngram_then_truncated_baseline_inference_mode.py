"""Summarizing documents longer than the model's window, the chunk-and-merge way people write it
around HF `generate()`: a BartForConditionalGeneration from a BartConfig (bart-large sizes: 1,024
d_model, 12 + 12 layers, 16 heads, 50,265-token vocabulary, 1,024 positions) in fp16 under
torch.inference_mode; 16 documents of 2,500 to 6,000 tokens cut into 1,024-token windows overlapping by
128 (`<s> ... </s>`), the windows of all documents sorted by length and summarized 16 at a time (beam
search, `num_beams=4`, 64 new tokens, `min_new_tokens` equal); then each document's window summaries
joined and summarized again in batches of 8 (`num_beams=4`, 96 new tokens, `length_penalty=2.0`,
`no_repeat_ngram_size=3`); then the naive baseline, every document truncated to its first 1,024
tokens and summarized in one batch of 16; 4 phases."""

import os

import torch
from transformers import BartConfig, BartForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34605)
if SMALL:
    config = BartConfig(
        vocab_size=400,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
    )
    N_DOCS, DOC_RANGE, WINDOW, OVERLAP, CHUNK_BATCH, NEW, MERGE_NEW = 4, (150, 300), 128, 16, 4, 8, 12
else:
    config = BartConfig(
        vocab_size=50265,
        d_model=1024,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_ffn_dim=4096,
        decoder_ffn_dim=4096,
        max_position_embeddings=1024,
    )
    N_DOCS, DOC_RANGE, WINDOW, OVERLAP, CHUNK_BATCH, NEW, MERGE_NEW = 16, (2500, 6001), 1024, 128, 16, 64, 96
BOS, PAD, EOS = config.bos_token_id, config.pad_token_id, config.eos_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BartForConditionalGeneration(config).half().to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gen = torch.Generator().manual_seed(21)
docs = [
    torch.randint(4, config.vocab_size, (int(n),), generator=gen)
    for n in torch.randint(*DOC_RANGE, (N_DOCS,), generator=gen)
]


def windows(doc):
    body, stride = WINDOW - 2, WINDOW - 2 - OVERLAP
    starts = range(0, max(1, len(doc) - OVERLAP), stride)
    return [doc[s : s + body] for s in starts]


def summarize(texts, **kwargs):
    """Pads `<s> text </s>` rows to the batch's longest and returns the generated tokens on the host."""
    rows = [torch.cat([torch.tensor([BOS]), t[: WINDOW - 2], torch.tensor([EOS])]) for t in texts]
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    with torch.inference_mode():
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), num_beams=4, **kwargs)
    return [o[(o != PAD) & (o != BOS) & (o != EOS)].cpu() for o in out]


pieces = [(d, w) for d, doc in enumerate(docs) for w in windows(doc)]
pieces.sort(key=lambda p: len(p[1]))
partial = {d: [] for d in range(N_DOCS)}
for s in range(0, len(pieces), CHUNK_BATCH):
    batch = pieces[s : s + CHUNK_BATCH]
    for (d, _), summary in zip(
        batch, summarize([w for _, w in batch], max_new_tokens=NEW, min_new_tokens=NEW), strict=True
    ):
        partial[d].append(summary)
print(f"{len(pieces)} windows summarized, {sum(len(v) for v in partial.values()) * NEW} tokens")
if device == "cuda":
    print(f"windows peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

joined = [torch.cat(partial[d]) for d in range(N_DOCS)]
final = []
for s in range(0, N_DOCS, 8):
    final += summarize(
        joined[s : s + 8],
        max_new_tokens=MERGE_NEW,
        min_new_tokens=MERGE_NEW,
        length_penalty=2.0,
        no_repeat_ngram_size=3,
    )
print(f"merged: {len(final)} summaries, mean length {sum(len(f) for f in final) / len(final):.1f}")
if device == "cuda":
    print(f"merge peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

baseline = summarize(docs, max_new_tokens=MERGE_NEW, min_new_tokens=MERGE_NEW)
overlap = sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(final, baseline, strict=True)) / N_DOCS
print(f"baseline: {len(baseline)} summaries, mean shared tokens with merged {overlap:.1f}")
if device == "cuda":
    print(f"baseline peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
