"""A cross-encoder reranker as sentence-transformers' CrossEncoder and the MS MARCO reranker recipes
(Nogueira & Cho's monoBERT, Tevatron's reranker with grouped listwise training) write it:
BertForSequenceClassification with num_labels 1 from BertConfig at MiniLM-L12's size (384 wide, 12
layers, 12 heads, feed-forward 1,536, vocabulary 30,522; sdpa attention). Inputs are query-passage
pairs "[CLS] query [SEP] passage [SEP]" of 256 tokens with token_type_ids 0 / 1 (query and passage
lengths drawn by a seeded CPU generator, the padding masked). Training: 16 queries a batch, each with a
group of 8 passages (1 positive first, 7 hard negatives): 128 pairs, the logits viewed (16, 8) and a
cross entropy with target 0 (listwise, as Tevatron's reranker), bf16 autocast, AdamW (lr 3e-5,
weight decay 0.01, foreach) with a cosine LambdaLR after 10 warmup steps, clip_grad_norm_ at 1.0; 4
steps (the first its own phase); then reranking the top 100 of 32 queries (3,200 pairs at batch 400)
under inference_mode and bf16 autocast, with a sigmoid score and topk 10; then the model cast to
fp16 by .half() and the same reranking without autocast; 4 phases after the model's."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17103)
if SMALL:
    config = BertConfig(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        num_labels=1,
    )
    NQ_B, GROUP, L, STEPS, EVAL_Q, TOP, EVAL_B = 2, 4, 32, 2, 2, 10, 10
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
    NQ_B, GROUP, L, STEPS, EVAL_Q, TOP, EVAL_B = 16, 8, 256, 4, 32, 100, 400
config._attn_implementation = "sdpa"
CLS, SEP = 101, 102
LOW = 10 if SMALL else 1000
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForSequenceClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01, foreach=True)
WARMUP, TOTAL = 10, 1000
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer,
    lambda s: (
        (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))
    ),
)
gen = torch.Generator().manual_seed(17103)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def pairs(n):
    """n tokenized (query, passage) pairs, as a tokenizer's padding="max_length" batch."""
    q_len = torch.randint(L // 32 + 2, L // 8 + 1, (n,), generator=gen)
    p_len = torch.randint(L // 4, L - L // 8, (n,), generator=gen)
    total = (q_len + p_len + 3).clamp(max=L)
    pos = torch.arange(L)[None, :]
    ids = torch.randint(LOW, config.vocab_size, (n, L), generator=gen)
    ids[:, 0] = CLS
    ids = torch.where(pos == q_len[:, None] + 1, torch.full_like(ids, SEP), ids)
    ids = torch.where(pos == total[:, None] - 1, torch.full_like(ids, SEP), ids)
    mask = (pos < total[:, None]).long()
    token_type = ((pos > q_len[:, None] + 1) & (pos < total[:, None])).long()
    return {
        "input_ids": (ids * mask).to(device),
        "attention_mask": mask.to(device),
        "token_type_ids": token_type.to(device),
    }


model.train()
for step in range(STEPS):
    batch = pairs(NQ_B * GROUP)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(**batch).logits.view(NQ_B, GROUP)
        loss = F.cross_entropy(logits.float(), torch.zeros(NQ_B, dtype=torch.long, device=device))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del batch, logits, loss


def rerank(autocast):
    model.eval()
    scores = torch.empty(EVAL_Q * TOP, device=device)
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        for start in range(0, EVAL_Q * TOP, EVAL_B):
            batch = pairs(EVAL_B)
            scores[start : start + EVAL_B] = torch.sigmoid(model(**batch).logits.squeeze(-1).float())
    return scores.view(EVAL_Q, TOP).topk(10, dim=1).indices


top = rerank(device == "cuda")
print(f"reranked bf16 {tuple(top.shape)}")
if device == "cuda":
    print(f"rerank peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del optimizer, scheduler
if device == "cuda":
    model.half()
top = rerank(False)
print(f"reranked fp16 {tuple(top.shape)}")
if device == "cuda":
    print(
        f"half allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
