"""Approximate nearest-neighbour search with product quantization written by hand, the way a team without
faiss-gpu serves an embedding index: a corpus of 2,000,000 x 768 fp16 unit vectors (filled chunk by chunk into
one preallocated tensor, as if read from disk), 96 sub-spaces of 8 dimensions, 256 centroids each.

1. Set-up: the fp16 corpus (2M x 768, rows L2-normalised per chunk of 262,144) and 1,024 fp16 queries.
2. Codebook training: 32,768 training rows picked with `torch.randperm` (fixed count), viewed as
   (96, 32768, 8) fp32; 8 Lloyd iterations of all 96 sub-space k-means at once: squared distances by
   `torch.baddbmm(|c|^2, x, c^T, alpha=-2)` in 4 chunks of 8,192 rows, argmin, then the new centroids by
   `index_add_` over the flattened (sub-space, centroid) index and `torch.bincount(minlength=96*256)` counts
   (empty centroids keep their old value via `torch.where`).
3. Encoding: the whole corpus in chunks of 32,768 rows, the same baddbmm distances (fp32), argmin, stored
   as uint8 codes in a preallocated (2M, 96) tensor.
4. Search (asymmetric distance computation): per query a (96, 256) fp32 look-up table of inner products
   (`torch.bmm` of the queries' sub-vectors with the codebooks), flattened; the codes' flat offsets
   (code + 256 * sub-space, int64) per corpus chunk of 65,536;
   scores = LUT[:, offsets].view(64, C, 96).sum(-1) for blocks of 64 queries, then topk(100) per chunk
   merged with the running top-100 (cat + topk).
5. Re-ranking: the 100 candidates' fp16 vectors gathered with `index_select` (1024 x 100 x 768), exact inner
   products by `torch.bmm`, top-10; then the exact top-10 of the first 64 queries by brute force (fp16 matmul
   over chunks of 262,144 rows, topk merge) and the recall@10 of the PQ pipeline.

Phases: set-up | codebook k-means | corpus encoding | ADC search | exact rerank + recall. 5 phases."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34101)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N, NQ, NTRAIN, ITERS, FILL, ENC, SCAN, QB = 20_000, 64, 4_096, 2, 8_192, 4_096, 4_096, 32
else:
    N, NQ, NTRAIN, ITERS, FILL, ENC, SCAN, QB = 2_000_000, 1_024, 32_768, 8, 262_144, 32_768, 65_536, 64
D, M, K, TOPK, FINAL, NEXACT = 768, 96, 256, 100, 10, 64
DSUB = D // M


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


corpus = torch.empty(N, D, dtype=torch.float16, device=device)
for start in range(0, N, FILL):
    stop = min(start + FILL, N)
    chunk = torch.randn(stop - start, D, device=device)
    corpus[start:stop] = F.normalize(chunk, dim=1).half()
    del chunk
queries = F.normalize(
    corpus[torch.randint(0, N, (NQ,), device=device)].float() + 0.3 * torch.randn(NQ, D, device=device), dim=1
).half()
report("fp16 corpus and queries")


def sub_distances(x, cents, cnorm):
    """(M, R, DSUB) fp32 rows against (M, K, DSUB) centroids: (M, R, K) squared distances minus |x|^2."""
    return torch.baddbmm(cnorm.unsqueeze(1), x, cents.transpose(1, 2), alpha=-2.0)


train = corpus[torch.randperm(N, device=device)[:NTRAIN]].float()
xs = train.view(NTRAIN, M, DSUB).transpose(0, 1).contiguous()
del train
cents = xs[:, torch.randperm(NTRAIN, device=device)[:K]].clone()
offsets = (torch.arange(M, device=device) * K).unsqueeze(1)
for _ in range(ITERS):
    cnorm = (cents * cents).sum(-1)
    assign = torch.cat(
        [sub_distances(part, cents, cnorm).argmin(-1) for part in xs.split(NTRAIN // 4, dim=1)], 1
    )
    flat = (assign + offsets).reshape(-1)
    sums = torch.zeros(M * K, DSUB, device=device).index_add_(0, flat, xs.reshape(-1, DSUB))
    counts = torch.bincount(flat, minlength=M * K).unsqueeze(1)
    new = (sums / counts.clamp(min=1)).view(M, K, DSUB)
    cents = torch.where(counts.view(M, K, 1) > 0, new, cents)
    del assign, flat, sums, counts, new
print("codebooks", tuple(cents.shape))
del xs
report("batched sub-space k-means")

codes = torch.empty(N, M, dtype=torch.uint8, device=device)
cnorm = (cents * cents).sum(-1)
with torch.inference_mode():
    for start in range(0, N, ENC):
        stop = min(start + ENC, N)
        x = corpus[start:stop].float().view(stop - start, M, DSUB).transpose(0, 1)
        codes[start:stop] = sub_distances(x, cents, cnorm).argmin(-1).t().to(torch.uint8)
        del x
print("codes", tuple(codes.shape), codes.dtype)
report("corpus encoded to uint8 codes")

with torch.inference_mode():
    qs = queries.float().view(NQ, M, DSUB).transpose(0, 1)
    lut = torch.bmm(qs, cents.transpose(1, 2)).transpose(0, 1).reshape(NQ, M * K).contiguous()
    best_s = torch.full((NQ, TOPK), float("-inf"), device=device)
    best_i = torch.zeros(NQ, TOPK, dtype=torch.long, device=device)
    for start in range(0, N, SCAN):
        stop = min(start + SCAN, N)
        flat = (codes[start:stop].long() + offsets.t()).reshape(-1)
        ids = torch.arange(start, stop, device=device)
        for q0 in range(0, NQ, QB):
            q1 = q0 + QB
            scores = lut[q0:q1, flat].view(q1 - q0, stop - start, M).sum(-1)
            s, i = scores.topk(TOPK, dim=1)
            both_s = torch.cat([best_s[q0:q1], s], 1)
            both_i = torch.cat([best_i[q0:q1], ids[i]], 1)
            top_s, pos = both_s.topk(TOPK, dim=1)
            best_s[q0:q1] = top_s
            best_i[q0:q1] = both_i.gather(1, pos)
            del scores, s, i, both_s, both_i, top_s, pos
        del flat, ids
print("ADC candidates", tuple(best_i.shape))
report("LUT asymmetric distance search")

with torch.inference_mode():
    cand = corpus.index_select(0, best_i.reshape(-1)).view(NQ, TOPK, D)
    exact = torch.bmm(cand, queries.unsqueeze(2)).squeeze(2).float()
    top_s, pos = exact.topk(FINAL, dim=1)
    result = best_i.gather(1, pos)
    del cand, exact
    gt_s = torch.full((NEXACT, FINAL), float("-inf"), device=device)
    gt_i = torch.zeros(NEXACT, FINAL, dtype=torch.long, device=device)
    for start in range(0, N, FILL):
        stop = min(start + FILL, N)
        s, i = (queries[:NEXACT] @ corpus[start:stop].t()).float().topk(FINAL, dim=1)
        both_s = torch.cat([gt_s, s], 1)
        both_i = torch.cat([gt_i, i + start], 1)
        gt_s, pos = both_s.topk(FINAL, dim=1)
        gt_i = both_i.gather(1, pos)
    hits = (result[:NEXACT].unsqueeze(2) == gt_i.unsqueeze(1)).any(2).float().sum(1)
    recall = (hits / FINAL).mean().item()
print(f"recall@{FINAL} over {NEXACT} queries: {recall:.3f}", tuple(result.shape))
report("exact rerank and brute-force recall")
