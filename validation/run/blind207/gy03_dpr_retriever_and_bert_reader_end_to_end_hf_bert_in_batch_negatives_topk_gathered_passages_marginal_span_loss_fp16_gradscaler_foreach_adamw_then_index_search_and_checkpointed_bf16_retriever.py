"""A dense retriever and an extractive reader trained end to end (DPR + a top-k marginal reader, in the
spirit of Karpukhin et al. 2020 and Sachan et al. 2021), on random tokens.

Retriever: a question encoder and a passage encoder, two 6-layer BERTs from BertConfig (d 768), [CLS]
pooling. Each of 64 questions (32 tokens) brings one positive and one hard-negative passage (192 tokens,
right-padded), so the score matrix q @ p.T is 64 x 128 with in-batch negatives (target 2i).
Reader: a 6-layer BertForQuestionAnswering over "question [SEP] passage" pairs of the 4 top-scoring
passages of each question (torch.topk over the score matrix, the passages gathered by index_select,
their scores by torch.gather). Loss: the in-batch retrieval cross-entropy plus the negative log of the
marginal over the 4 passages of p(passage | question) * p(start) * p(end), so the reader's likelihood
trains the retriever through the gathered scores.

Phases: the first step (fp16 autocast, GradScaler, foreach AdamW over all three encoders); 2 more steps;
an index of 32,768 passages built by the passage encoder under inference_mode in chunks of 1024
(fp16 vectors), searched by 4,096 questions with a matmul and top-100; then the retriever alone trained
with bf16 autocast and HF gradient checkpointing at 256 questions, fused AdamW. 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForQuestionAnswering, BertModel

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2073)
if SMALL:
    enc_cfg = BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=256,
    )
    NQ, QLEN, PLEN, TOPK, CORPUS, CHUNK, SEARCH, BIG_NQ = 8, 8, 32, 2, 256, 64, 32, 16
else:
    enc_cfg = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
    )
    NQ, QLEN, PLEN, TOPK, CORPUS, CHUNK, SEARCH, BIG_NQ = 64, 32, 192, 4, 32768, 1024, 4096, 256
RLEN = QLEN + PLEN
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def tokens(n, length, min_len):
    ids = torch.randint(1000 if not SMALL else 5, enc_cfg.vocab_size, (n, length), device=device)
    ids[:, 0] = 101 if not SMALL else 1
    lengths = torch.randint(min_len, length + 1, (n, 1), device=device)
    mask = torch.arange(length, device=device) < lengths
    return ids.masked_fill(~mask, 0), mask.long()


def cls(encoder, ids, mask):
    return encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]


q_encoder = BertModel(enc_cfg, add_pooling_layer=False).to(device)
p_encoder = BertModel(enc_cfg, add_pooling_layer=False).to(device)
reader = BertForQuestionAnswering(enc_cfg).to(device)
params = [*q_encoder.parameters(), *p_encoder.parameters(), *reader.parameters()]
print(f"params {sum(p.numel() for p in params) / 1e6:.1f}M")
opt = torch.optim.AdamW(params, lr=2e-5, weight_decay=0.01, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def joint_step():
    q_ids, q_mask = tokens(NQ, QLEN, QLEN // 2)
    p_ids, p_mask = tokens(2 * NQ, PLEN, PLEN // 3)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        q = cls(q_encoder, q_ids, q_mask)
        p = cls(p_encoder, p_ids, p_mask)
        scores = (q @ p.T).float()
        target = torch.arange(NQ, device=device) * 2
        retr_loss = F.cross_entropy(scores, target)
        top = scores.detach().topk(TOPK, dim=1).indices
        top_scores = torch.gather(scores, 1, top)
        log_p_passage = F.log_softmax(top_scores, dim=1)
        flat = top.reshape(-1)
        pair_ids = torch.cat([q_ids.repeat_interleave(TOPK, 0), p_ids.index_select(0, flat)], dim=1)
        pair_mask = torch.cat([q_mask.repeat_interleave(TOPK, 0), p_mask.index_select(0, flat)], dim=1)
        token_type = torch.cat(
            [
                torch.zeros(NQ * TOPK, QLEN, dtype=torch.long, device=device),
                torch.ones(NQ * TOPK, PLEN, dtype=torch.long, device=device),
            ],
            dim=1,
        )
        out = reader(input_ids=pair_ids, attention_mask=pair_mask, token_type_ids=token_type)
        start = torch.randint(QLEN, QLEN + PLEN // 3 - 8, (NQ * TOPK, 1), device=device)
        end = start + torch.randint(0, 8, (NQ * TOPK, 1), device=device)
        neg = torch.finfo(torch.float32).min
        s_logp = F.log_softmax(out.start_logits.float().masked_fill(pair_mask == 0, neg), dim=1).gather(
            1, start
        )
        e_logp = F.log_softmax(out.end_logits.float().masked_fill(pair_mask == 0, neg), dim=1).gather(1, end)
        span = (s_logp + e_logp).view(NQ, TOPK)
        reader_loss = -torch.logsumexp(log_p_passage + span, dim=1).mean()
        loss = retr_loss + reader_loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 2.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return retr_loss.item(), reader_loss.item()


for m in (q_encoder, p_encoder, reader):
    m.train()
for step in range(3):
    r, a = joint_step()
    print(f"step {step} retrieval loss {r:.4f} reader loss {a:.4f}")
    if step == 0:
        report("first step")
report("train")

p_encoder.eval()
q_encoder.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    index = torch.empty(CORPUS, enc_cfg.hidden_size, dtype=torch.float16, device=device)
    for s in range(0, CORPUS, CHUNK):
        ids, mask = tokens(CHUNK, PLEN, PLEN // 3)
        index[s : s + CHUNK] = cls(p_encoder, ids, mask)
    hits = []
    for s in range(0, SEARCH, 512):
        ids, mask = tokens(512, QLEN, QLEN // 2)
        qv = cls(q_encoder, ids, mask).half()
        hits.append((qv @ index.T).topk(100, dim=1).indices)
    hits = torch.cat(hits)
print(f"index {tuple(index.shape)} hits {tuple(hits.shape)}")
del index, hits
report("index and search")

del opt, scaler, reader, params
q_encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
p_encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
q_encoder.train()
p_encoder.train()
params = [*q_encoder.parameters(), *p_encoder.parameters()]
opt = torch.optim.AdamW(params, lr=2e-5, fused=amp)
for step in range(2):
    q_ids, q_mask = tokens(BIG_NQ, QLEN, QLEN // 2)
    p_ids, p_mask = tokens(2 * BIG_NQ, PLEN, PLEN // 3)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        scores = (cls(q_encoder, q_ids, q_mask) @ cls(p_encoder, p_ids, p_mask).T).float()
    loss = F.cross_entropy(scores, torch.arange(BIG_NQ, device=device) * 2)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"checkpointed retriever step {step} loss {loss.item():.4f}")
report("checkpointed bf16 retriever")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
