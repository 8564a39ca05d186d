"""A DPR-style dense retriever (Karpukhin et al. 2020, facebookresearch/DPR's biencoder) as a retrieval
user writes it with transformers, but from BertConfig at bert-small's size (512 wide, 4 layers, 8 heads,
feed-forward 2,048, vocabulary 30,522; sdpa attention) and two towers (a question encoder and a passage
encoder, BertModel without the pooler, [CLS] pooling). A batch is 64 questions of 32 tokens with 64
positive and 64 hard-negative passages of 192 tokens (lengths drawn by a seeded CPU generator, the
padding masked), scored against all 128 passages (in-batch negatives), InfoNCE at temperature 0.05
(cross entropy of the dot products / tau with the positive's index). fp16 autocast with GradScaler,
AdamW (lr 2e-5, weight decay 0.01) with get_linear_schedule_with_warmup, clip_grad_norm_ at 2.0 after
unscale_; 4 steps (the first its own phase); then the evaluation: the passage tower encodes a corpus
of 8,192 passages at batch 512 under no_grad and autocast into an fp16 index, 1,024 questions are
encoded at batch 256, their scores against the whole index (one matmul) and topk 100, the MRR@10 of
the gold passage; 4 phases after the model's."""

import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17101)
if SMALL:
    config = BertConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, QL, PL, STEPS, CORPUS, ENC_B, NQ, QB, TOPK = 4, 8, 16, 2, 64, 16, 16, 8, 10
else:
    config = BertConfig(
        vocab_size=30522,
        hidden_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        intermediate_size=2048,
        max_position_embeddings=512,
    )
    B, QL, PL, STEPS, CORPUS, ENC_B, NQ, QB, TOPK = 64, 32, 192, 4, 8192, 512, 1024, 256, 100
config._attn_implementation = "sdpa"
TAU = 0.05
device = "cuda" if torch.cuda.is_available() else "cpu"
q_encoder = BertModel(config, add_pooling_layer=False).to(device)
p_encoder = BertModel(config, add_pooling_layer=False).to(device)
params = list(q_encoder.parameters()) + list(p_encoder.parameters())
optimizer = torch.optim.AdamW(params, lr=2e-5, weight_decay=0.01)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=100, num_training_steps=1000)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
gen = torch.Generator().manual_seed(17101)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def tokens(n, length, min_len):
    lengths = torch.randint(min_len, length + 1, (n,), generator=gen)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    ids = torch.randint(1000 if not SMALL else 5, config.vocab_size, (n, length), generator=gen)
    ids[:, 0] = 101 if not SMALL else 1
    ids = ids * mask
    return ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)


def encode(encoder, ids, mask):
    return encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]


q_encoder.train()
p_encoder.train()
for step in range(STEPS):
    q_ids, q_mask = tokens(B, QL, QL // 2)
    p_ids, p_mask = tokens(2 * B, PL, PL // 3)  # positives first, then the hard negatives
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        q = encode(q_encoder, q_ids, q_mask)
        p = encode(p_encoder, p_ids, p_mask)
        scores = q @ p.t() / TAU
        loss = F.cross_entropy(scores.float(), torch.arange(B, device=device))
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(params, 2.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del q, p, scores, loss, q_ids, q_mask, p_ids, p_mask

q_encoder.eval()
p_encoder.eval()
index = torch.empty(CORPUS, config.hidden_size, dtype=torch.float16, device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for start in range(0, CORPUS, ENC_B):
        ids, mask = tokens(ENC_B, PL, PL // 3)
        index[start : start + ENC_B] = encode(p_encoder, ids, mask)
if device == "cuda":
    print(f"index peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

gold = torch.randint(0, CORPUS, (NQ,), generator=gen).to(device)
mrr = torch.zeros((), device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
    for start in range(0, NQ, QB):
        ids, mask = tokens(QB, QL, QL // 2)
        q = encode(q_encoder, ids, mask)
        scores = q.half() @ index.t()
        top_scores, top_ids = scores.topk(TOPK, dim=1)
        hit = top_ids[:, :10] == gold[start : start + QB, None]
        rank = torch.arange(1, 11, device=device, dtype=torch.float32)
        mrr += (hit.float() / rank).sum()
print(f"MRR@10 {mrr.item() / NQ:.4f}")
if device == "cuda":
    print(
        f"search allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
