"""BERT4Rec (Sun et al. 2019) on transformers' BertModel from a BertConfig: the cloze task over 300,000 items.

Model: BertModel(BertConfig(vocab_size = 300,000 items + [PAD] 0 + [MASK] 300,001, hidden 256, 4 layers,
4 heads, intermediate 1,024, GELU, max_position_embeddings 200, type_vocab_size 1, dropout 0.1),
add_pooling_layer=False, attention through SDPA), randomly initialised. The prediction head as the paper's:
Linear(256, 256) + GELU + LayerNorm, then the logits are the dot products with the (tied) item embedding
table plus an output bias, a full softmax over every item.

Data: 128 left-padded sequences of 200 item ids (lengths 40 to 200 drawn on the host, attention_mask 0 on
the padding); in each, exactly 40 of the real positions (chosen by the top-40 of random keys) replaced by
[MASK]; only the masked positions' hidden states are gathered into the head (5,120 rows), cross-entropy
against the original items. Weights fp32 under bf16 autocast, the logits cast to fp32 for the loss;
gradient checkpointing on (model.bert.gradient_checkpointing_enable()); torch.optim.AdamW (lr 1e-3, weight
decay 0.01 except biases and LayerNorm weights, default foreach), clipping at 5.0.

Phases: the first step; 3 more steps; evaluation under inference_mode: 1,024 users (chunks of 256) whose
last item is held out as the target and replaced by [MASK], the [MASK] position scored against the catalog,
recall@10 and NDCG@10 by the target's rank; then, after torch.cuda.empty_cache(), checkpointing off and 2
steps each accumulating 2 micro-batches of 64 sequences. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import BertConfig, BertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(20104)
if SMALL:
    N_ITEMS, HID, LAYERS, L, B, N_MASK, STEPS = 2000, 32, 2, 24, 4, 5, 1
    EVAL_USERS, EVAL_CHUNK, MIN_LEN = 16, 8, 6
else:
    N_ITEMS, HID, LAYERS, L, B, N_MASK, STEPS = 300_000, 256, 4, 200, 128, 40, 3
    EVAL_USERS, EVAL_CHUNK, MIN_LEN = 1024, 256, 40
PAD, MASK = 0, N_ITEMS + 1
VOCAB = N_ITEMS + 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        peak_mib = torch.cuda.max_memory_allocated() >> 20
        print(f"{tag}: peak {peak_mib} MiB reserved {torch.cuda.memory_reserved() >> 20} MiB")
        torch.cuda.reset_peak_memory_stats()


class BERT4Rec(nn.Module):
    def __init__(self):
        super().__init__()
        cfg = BertConfig(
            vocab_size=VOCAB, hidden_size=HID, num_hidden_layers=LAYERS, num_attention_heads=4,
            intermediate_size=4 * HID, max_position_embeddings=L, type_vocab_size=1,
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, pad_token_id=PAD,
        )  # fmt: skip
        cfg._attn_implementation = "sdpa"
        self.bert = BertModel(cfg, add_pooling_layer=False)
        self.transform = nn.Sequential(nn.Linear(HID, HID), nn.GELU(), nn.LayerNorm(HID, eps=1e-12))
        self.out_bias = nn.Parameter(torch.zeros(VOCAB))

    def hidden(self, ids, attn):
        return self.bert(input_ids=ids, attention_mask=attn).last_hidden_state

    def logits(self, h):
        return self.transform(h) @ self.bert.embeddings.word_embeddings.weight.T + self.out_bias


def host_batch(b):
    lengths = torch.randint(MIN_LEN, L + 1, (b,))
    items = torch.randint(1, N_ITEMS + 1, (b, L))
    real = torch.arange(L) >= (L - lengths).unsqueeze(1)
    items[~real] = PAD
    keys = torch.rand(b, L).masked_fill(~real, -1.0)
    pos = keys.topk(N_MASK, dim=1).indices
    labels = items.gather(1, pos)
    ids = items.scatter(1, pos, MASK)
    return ids, real.long(), pos, labels, items


model = BERT4Rec().to(device)
print(f"BERT4Rec: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3
)
model.bert.gradient_checkpointing_enable()


def cloze_loss(b):
    ids, attn, pos, labels, _ = (t.to(device) for t in host_batch(b))
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        h = model.hidden(ids, attn)
        hm = h.gather(1, pos.unsqueeze(-1).expand(-1, -1, HID))
        logits = model.logits(hm)
    return F.cross_entropy(logits.float().view(-1, VOCAB), labels.view(-1))


def train_step(b, accum=1):
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for _ in range(accum):
        loss = cloze_loss(b) / accum
        loss.backward()
        total += loss.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    return total


model.train()
print(f"step 0 loss {train_step(B):.4f} (log V = {math.log(VOCAB):.2f})")
report("first step")
for _ in range(STEPS):
    loss = train_step(B)
print(f"step {STEPS} loss {loss:.4f}")
report("train")

model.eval()
recall, ndcg = 0.0, 0.0
with torch.inference_mode():
    _, attn_all, _, _, items_all = host_batch(EVAL_USERS)
    for start in range(0, EVAL_USERS, EVAL_CHUNK):
        items = items_all[start : start + EVAL_CHUNK].to(device)
        attn = attn_all[start : start + EVAL_CHUNK].to(device)
        target = items[:, -1].clone()
        ids = torch.cat([items[:, :-1], torch.full_like(items[:, :1], MASK)], 1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model.logits(model.hidden(ids, attn)[:, -1]).float()
        logits[:, PAD] = float("-inf")
        logits[:, MASK] = float("-inf")
        rank = (logits > logits.gather(1, target[:, None])).sum(1)
        recall += (rank < 10).sum().item()
        ndcg += torch.where(rank < 10, 1.0 / torch.log2(rank.float() + 2), 0.0).sum().item()
print(f"recall@10 {recall / EVAL_USERS:.4f} ndcg@10 {ndcg / EVAL_USERS:.4f}")
del logits, rank
report("eval")

if device == "cuda":
    torch.cuda.empty_cache()
model.bert.gradient_checkpointing_disable()
model.train()
for s in range(2):
    loss = train_step(B // 2, accum=2)
    print(f"accumulated step {s} loss {loss:.4f}")
if device == "cuda":
    print(f"allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
