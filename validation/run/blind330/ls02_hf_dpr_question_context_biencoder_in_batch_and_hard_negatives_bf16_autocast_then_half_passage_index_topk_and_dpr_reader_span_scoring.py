"""Open-domain QA with Hugging Face DPR, built from configs: a DPRQuestionEncoder and a DPRContextEncoder
(6-layer BERT-style towers, a 256-d projection head) are trained as a bi-encoder with in-batch negatives
plus one hard negative per question (2B passages per step, cross-entropy over the B x 2B score matrix)
under bf16 autocast with fused AdamW; the context encoder is then cast to `.half()` to index a passage
corpus in chunks under inference_mode (fp16 index kept on the GPU), questions are embedded and the top-8
passages retrieved with topk; finally a DPRReader (4 layers) scores start/end/relevance logits for each
question's 8 retrieved passages and the best span is found with a triu-masked start+end score matrix.

Phases: 0 models and data; 1 bi-encoder bf16 training; 2 half passage index and retrieval; 3 reader spans."""

import os

import torch
import torch.nn.functional as F
from transformers import DPRConfig, DPRContextEncoder, DPRQuestionEncoder, DPRReader

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3302)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    W, H, FF, L, V, QLEN, PLEN, BS, STEPS, CORPUS, CHUNK, NQ, RLEN, MAXSPAN = (
        64,
        4,
        128,
        2,
        2000,
        16,
        32,
        4,
        2,
        64,
        16,
        4,
        48,
        6,
    )
else:
    W, H, FF, L, V, QLEN, PLEN, BS, STEPS, CORPUS, CHUNK, NQ, RLEN, MAXSPAN = (
        768,
        12,
        3072,
        6,
        30522,
        32,
        192,
        32,
        5,
        8192,
        512,
        64,
        256,
        16,
    )
TOPK = 8


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def cfg(layers, projection_dim=256):
    return DPRConfig(
        vocab_size=V,
        hidden_size=W,
        num_hidden_layers=layers,
        num_attention_heads=H,
        intermediate_size=FF,
        max_position_embeddings=512,
        projection_dim=projection_dim,
    )


def tokens(n, length, device=device):
    lens = torch.randint(length // 2, length + 1, (n,))
    mask = (torch.arange(length)[None, :] < lens[:, None]).long()
    ids = torch.randint(1000, V, (n, length)) * mask
    ids[:, 0] = 101
    return ids.to(device), mask.to(device)


q_enc = DPRQuestionEncoder(cfg(L)).to(device)
c_enc = DPRContextEncoder(cfg(L)).to(device)
q_ids, q_mask = tokens(BS * STEPS, QLEN)
p_ids, p_mask = tokens(2 * BS * STEPS, PLEN)
report("models and data")

params = list(q_enc.parameters()) + list(c_enc.parameters())
opt = torch.optim.AdamW(params, lr=2e-5, weight_decay=0.0, fused=device == "cuda")
q_enc.train()
c_enc.train()
labels = torch.arange(BS, device=device) * 2
for step in range(STEPS):
    qs = slice(step * BS, (step + 1) * BS)
    ps = slice(step * 2 * BS, (step + 1) * 2 * BS)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        qv = q_enc(input_ids=q_ids[qs], attention_mask=q_mask[qs]).pooler_output
        pv = c_enc(input_ids=p_ids[ps], attention_mask=p_mask[ps]).pooler_output
        scores = qv @ pv.T
    loss = F.cross_entropy(scores.float(), labels)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 2.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("bi-encoder loss", round(loss.item(), 4))
del qv, pv, scores, loss, opt, params
report("bi-encoder bf16 training")

c_enc.eval().half()
q_enc.eval()
index = torch.empty(CORPUS, 256, device=device, dtype=torch.float16)
corpus_ids, corpus_mask = tokens(CORPUS, PLEN, device="cpu")
with torch.inference_mode():
    for i in range(0, CORPUS, CHUNK):
        index[i : i + CHUNK] = c_enc(
            input_ids=corpus_ids[i : i + CHUNK].to(device),
            attention_mask=corpus_mask[i : i + CHUNK].to(device),
        ).pooler_output
    ask_ids, ask_mask = tokens(NQ, QLEN)
    qv = q_enc(input_ids=ask_ids, attention_mask=ask_mask).pooler_output.half()
    top = (qv @ index.T).topk(TOPK, dim=1)
print("retrieved", tuple(top.indices.shape))
report("half passage index and retrieval")

reader = DPRReader(cfg(L - 2, projection_dim=0)).to(device).eval()
r_ids, r_mask = tokens(NQ * TOPK, RLEN)
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    out = reader(input_ids=r_ids, attention_mask=r_mask)
    start = out.start_logits.float().masked_fill(r_mask == 0, -1e4)
    end = out.end_logits.float().masked_fill(r_mask == 0, -1e4)
    span = start[:, :, None] + end[:, None, :]
    allowed = torch.ones(RLEN, RLEN, device=device, dtype=torch.bool).triu().tril(MAXSPAN - 1)
    span = span.masked_fill(~allowed, -1e9).view(NQ, TOPK, -1)
    best_span = span.max(dim=-1)
    rel = out.relevance_logits.float().view(NQ, TOPK).softmax(dim=-1)
    pick = (rel * best_span.values.sigmoid()).argmax(dim=-1)
print("reader", tuple(span.shape), pick[:8].tolist())
report("reader spans")
