"""Matryoshka sentence embeddings (Kusupati et al. 2022; sentence-transformers' MatryoshkaLoss over
MultipleNegativesRankingLoss and SoftmaxLoss, as its NLI training example writes them, inlined): a
BertModel from BertConfig 768 wide with 6 layers (12 heads, feed-forward 3,072, vocabulary 30,522; sdpa
attention), mean pooling over the attention mask. A batch is 128 (anchor, positive, label) sentence
pairs of 64 tokens (lengths drawn by a seeded CPU generator). For each nested prefix of the embedding
(768, 512, 256, 128, 64 dims): the in-batch-negatives ranking loss (cosine similarities x 20 over
the 128 x 128 pairs, cross entropy with the diagonal) and the NLI softmax loss of its own Linear(3d,
3) head over (u, v, |u - v|); Matryoshka weights 1. bf16 autocast, AdamW (lr 2e-5, foreach=False,
the per-parameter loop) with a linear warmup LambdaLR; 4 steps (the first its own phase); then a
corpus of 16,384 sentences encoded under inference_mode at batch 1,024 into fp32, 1,024 queries, the
retrieval at every truncated dimension (normalize the prefix, scores, topk 10, overlap with the
full-dimensional top 10); then binary quantization of the 256-dim prefix (sign bits packed to uint8 by
hand) and a Hamming search by XOR and a popcount lookup table in chunks of 128 queries; 5 phases after
the model's."""

import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17105)
if SMALL:
    config = BertConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, L, STEPS, CORPUS, ENC_B, NQ, QCHUNK = 8, 16, 2, 256, 64, 32, 16
    DIMS = [64, 32, 16, 8]
else:
    config = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=6,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
    )
    B, L, STEPS, CORPUS, ENC_B, NQ, QCHUNK = 128, 64, 4, 16384, 1024, 1024, 128
    DIMS = [768, 512, 256, 128, 64]
config._attn_implementation = "sdpa"
SCALE = 20.0
LOW = 10 if SMALL else 1000
BIN_DIM = DIMS[2]
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertModel(config, add_pooling_layer=False).to(device)
heads = torch.nn.ModuleList([torch.nn.Linear(3 * d, 3) for d in DIMS]).to(device)
params = list(model.parameters()) + list(heads.parameters())
optimizer = torch.optim.AdamW(params, lr=2e-5, foreach=False)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 50))
gen = torch.Generator().manual_seed(17105)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def sentences(n):
    lengths = torch.randint(L // 4, L + 1, (n,), generator=gen)
    mask = (torch.arange(L)[None, :] < lengths[:, None]).long()
    ids = torch.randint(LOW, config.vocab_size, (n, L), generator=gen)
    ids[:, 0] = 101 if not SMALL else 1
    return (ids * mask).to(device), mask.to(device)


def embed(ids, mask):
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


model.train()
for step in range(STEPS):
    a_ids, a_mask = sentences(B)
    p_ids, p_mask = sentences(B)
    labels = torch.randint(0, 3, (B,), generator=gen).to(device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        u_full = embed(a_ids, a_mask)
        v_full = embed(p_ids, p_mask)
        loss = 0.0
        for d, head in zip(DIMS, heads, strict=True):
            u, v = u_full[:, :d], v_full[:, :d]
            sim = F.normalize(u, dim=-1) @ F.normalize(v, dim=-1).t() * SCALE
            loss = loss + F.cross_entropy(sim, torch.arange(B, device=device))
            logits = head(torch.cat([u, v, (u - v).abs()], dim=-1))
            loss = loss + F.cross_entropy(logits, labels)
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del u_full, v_full, u, v, sim, logits, loss

model.eval()
corpus = torch.empty(CORPUS, DIMS[0], device=device)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for start in range(0, CORPUS, ENC_B):
        corpus[start : start + ENC_B] = embed(*sentences(ENC_B)).float()
    queries = embed(*sentences(NQ)).float()
if device == "cuda":
    print(f"encode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    full_top = None
    for d in DIMS:
        c = F.normalize(corpus[:, :d], dim=-1)
        q = F.normalize(queries[:, :d], dim=-1)
        top = (q @ c.t()).topk(10, dim=1).indices
        if full_top is None:
            full_top = top
        overlap = (top[:, :, None] == full_top[:, None, :]).any(-1).float().mean()
        print(f"dim {d} overlap@10 {overlap.item():.3f}")
    del c, q
if device == "cuda":
    print(f"matryoshka peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def pack_bits(x):
    bits = (x > 0).to(torch.uint8).view(x.size(0), -1, 8)
    weights = 2 ** torch.arange(7, -1, -1, device=x.device, dtype=torch.uint8)
    return (bits * weights).sum(-1, dtype=torch.uint8)


with torch.inference_mode():
    popcount = torch.tensor([bin(i).count("1") for i in range(256)], dtype=torch.uint8, device=device)
    c_bits = pack_bits(corpus[:, :BIN_DIM])
    q_bits = pack_bits(queries[:, :BIN_DIM])
    hits = []
    for start in range(0, NQ, QCHUNK):
        xor = torch.bitwise_xor(q_bits[start : start + QCHUNK, None, :], c_bits[None, :, :])
        dist = popcount[xor.long()].sum(-1, dtype=torch.int32)
        hits.append(dist.topk(10, dim=1, largest=False).indices)
    hits = torch.cat(hits)
    overlap = (hits[:, :, None] == full_top[:, None, :]).any(-1).float().mean()
print(f"binary {BIN_DIM} overlap@10 {overlap.item():.3f}")
if device == "cuda":
    print(
        f"binary allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
