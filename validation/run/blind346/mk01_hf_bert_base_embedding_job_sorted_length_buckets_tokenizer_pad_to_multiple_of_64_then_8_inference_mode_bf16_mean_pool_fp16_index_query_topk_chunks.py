"""Offline embedding job with an HF BertModel from a BertConfig (base sizes, 30,522-token vocabulary)
in bf16 under torch.inference_mode, no serving framework: 16,384 documents of random lengths (12 to
510 word pieces plus [CLS]/[SEP], drawn on the host), sorted by length into batches of 256, each padded
by a PreTrainedTokenizerFast built in memory (`tokenizer.pad(..., pad_to_multiple_of=64)`), mean pooled
over the attention mask in fp32, `F.normalize`d and written by index into a preallocated fp16 index in
the corpus order; then the same job with `pad_to_multiple_of=8` (less padding) and the largest
difference between the two indexes; then 4,096 short queries embedded the same way and searched against
the index in chunks of 512 queries (`topk` 10), the hits moved to the host; 4 phases."""

import os

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34601)
if SMALL:
    config = BertConfig(
        vocab_size=600,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    N_DOCS, BATCH, N_QUERIES, CHUNK, MAX_LEN = 256, 32, 64, 16, 120
else:
    config = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
    )
    N_DOCS, BATCH, N_QUERIES, CHUNK, MAX_LEN = 16384, 256, 4096, 512, 510
device = "cuda" if torch.cuda.is_available() else "cpu"

vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
vocab.update({f"w{i}": i for i in range(4, config.vocab_size)})
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")),
    pad_token="[PAD]",
    unk_token="[UNK]",
    cls_token="[CLS]",
    sep_token="[SEP]",
)

model = BertModel(config, add_pooling_layer=False).to(torch.bfloat16).to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gen = torch.Generator().manual_seed(7)
doc_lengths = torch.randint(12, MAX_LEN + 1, (N_DOCS,), generator=gen)
doc_lengths = torch.where(torch.rand(N_DOCS, generator=gen) < 0.6, doc_lengths // 3 + 4, doc_lengths)
docs = [[2, *torch.randint(4, config.vocab_size, (int(n),), generator=gen).tolist(), 3] for n in doc_lengths]
q_lengths = torch.randint(6, 40, (N_QUERIES,), generator=gen)
queries = [[2, *torch.randint(4, config.vocab_size, (int(n),), generator=gen).tolist(), 3] for n in q_lengths]


def embed_all(texts, multiple):
    """Embeds token lists in length order, batches of BATCH, into an fp16 matrix in the input order."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = torch.empty(len(texts), config.hidden_size, dtype=torch.float16, device=device)
    padded = 0
    with torch.inference_mode():
        for s in range(0, len(order), BATCH):
            idx = order[s : s + BATCH]
            enc = tokenizer.pad(
                {"input_ids": [texts[i] for i in idx]},
                padding="longest",
                pad_to_multiple_of=multiple,
                return_tensors="pt",
            )
            ids = enc["input_ids"].to(device, non_blocking=True)
            mask = enc["attention_mask"].to(device, non_blocking=True)
            padded += ids.numel()
            h = model(input_ids=ids, attention_mask=mask).last_hidden_state
            m = mask.unsqueeze(-1).float()
            pooled = (h.float() * m).sum(1) / m.sum(1).clamp(min=1e-6)
            out[torch.tensor(idx, device=device)] = F.normalize(pooled, dim=-1).half()
            del h, m, pooled, ids, mask
    return out, padded


index64, tokens64 = embed_all(docs, 64)
print(f"embedded {index64.shape[0]} docs, {tokens64} padded tokens at multiple 64")
if device == "cuda":
    print(f"embed64 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

index8, tokens8 = embed_all(docs, 8)
diff = (index64.float() - index8.float()).abs().max().item()
print(f"{tokens8} padded tokens at multiple 8, max diff {diff:.4f}")
del index8
if device == "cuda":
    print(f"embed8 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

q_index, _ = embed_all(queries, 8)
hits = []
with torch.inference_mode():
    for s in range(0, N_QUERIES, CHUNK):
        scores = q_index[s : s + CHUNK] @ index64.t()
        top = scores.float().topk(10, dim=-1)
        hits.append(top.indices.cpu())
        del scores, top
hits = torch.cat(hits)
print(f"searched {hits.shape[0]} queries, first hits {hits[0, :3].tolist()}")
if device == "cuda":
    print(f"search peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
