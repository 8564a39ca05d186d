"""A large-scale exhaustive kNN evaluation of embeddings on one GPU, as retrieval users write it
instead of faiss's GpuIndexFlatIP (the chunked brute force of faiss's bfKnn and of BEIR's
DenseRetrievalExactSearch, by torch alone): a corpus of 4,194,304 embeddings of 768 dims built chunk by
chunk (torch.randn of 262,144 x 768 in fp32, F.normalize, stored into a preallocated fp16 matrix:
6 GiB); 8,192 fp16 queries searched in batches of 1,024 against corpus chunks of 1,048,576 rows (a
2 GiB fp16 score block per matmul), topk 100 per chunk and a running merge (cat of the kept and the
new candidates with the chunk's offset added to the indices, topk again, gather); then the exact fp32
ground truth for 512 queries (each corpus chunk cast to fp32, matmul, topk 10) and recall@10 of the
fp16 search; then an L2 search of 256 queries over the first 1,048,576 rows by torch.cdist in fp32
(chunks of 262,144 rows, the matmul path) and topk with largest=False; then IVF training as faiss's
k-means does it by hand: 1,024 centroids over a 262,144-row sample, 5 iterations of assignment (fp16
scores, argmax) and update (index_add_ of the members and of ones into fp32 sums and counts), then the
whole corpus assigned in chunks and the inverted lists ordered by a stable argsort; 5 phases."""

import os

import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17106)
if SMALL:
    N, D, BUILD, NQ, QB, CHUNK, K, NGT, NL2, L2_ROWS, L2_CHUNK, NLIST, SAMPLE, ITERS = (
        4096,
        32,
        1024,
        64,
        16,
        1024,
        10,
        16,
        8,
        2048,
        512,
        16,
        1024,
        2,
    )
else:
    N, D, BUILD, NQ, QB, CHUNK, K, NGT, NL2, L2_ROWS, L2_CHUNK, NLIST, SAMPLE, ITERS = (
        4194304,
        768,
        262144,
        8192,
        1024,
        1048576,
        100,
        512,
        256,
        1048576,
        262144,
        1024,
        262144,
        5,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"

corpus = torch.empty(N, D, dtype=torch.float16, device=device)
for start in range(0, N, BUILD):
    x = torch.randn(BUILD, D, device=device)
    corpus[start : start + BUILD] = F.normalize(x, dim=1).half()
del x
queries = F.normalize(torch.randn(NQ, D, device=device), dim=1).half()
print(f"corpus {tuple(corpus.shape)} {corpus.dtype}")
if device == "cuda":
    print(f"build peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@torch.no_grad()
def search(q, k):
    best_v = best_i = None
    for start in range(0, N, CHUNK):
        scores = q @ corpus[start : start + CHUNK].t()
        v, i = scores.topk(k, dim=1)
        i += start
        if best_v is None:
            best_v, best_i = v, i
        else:
            cand_v, cand_i = torch.cat([best_v, v], dim=1), torch.cat([best_i, i], dim=1)
            best_v, pos = cand_v.topk(k, dim=1)
            best_i = cand_i.gather(1, pos)
        del scores
    return best_v, best_i


found = []
for start in range(0, NQ, QB):
    found.append(search(queries[start : start + QB], K)[1])
found = torch.cat(found)
print(f"search {tuple(found.shape)}")
if device == "cuda":
    print(f"search peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    q32 = queries[:NGT].float()
    gt_v = gt_i = None
    for start in range(0, N, CHUNK):
        scores = q32 @ corpus[start : start + CHUNK].float().t()
        v, i = scores.topk(10, dim=1)
        i += start
        if gt_v is None:
            gt_v, gt_i = v, i
        else:
            gt_v, pos = torch.cat([gt_v, v], dim=1).topk(10, dim=1)
            gt_i = torch.cat([gt_i, i], dim=1).gather(1, pos)
    del scores
    recall = (found[:NGT, :10, None] == gt_i[:, None, :]).any(-1).float().mean()
print(f"recall@10 fp16 vs fp32 {recall.item():.4f}")
if device == "cuda":
    print(f"ground truth peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    q32 = queries[:NL2].float()
    l2_v, l2_i = [], []
    for start in range(0, L2_ROWS, L2_CHUNK):
        dist = torch.cdist(q32, corpus[start : start + L2_CHUNK].float())
        v, i = dist.topk(10, dim=1, largest=False)
        l2_v.append(v)
        l2_i.append(i + start)
    l2_v, pos = torch.cat(l2_v, dim=1).topk(10, dim=1, largest=False)
    l2_i = torch.cat(l2_i, dim=1).gather(1, pos)
    del dist
print(f"l2 {tuple(l2_i.shape)}")
if device == "cuda":
    print(f"l2 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    sample = corpus[torch.randperm(N, device=device)[:SAMPLE]]
    centroids = sample[torch.randperm(SAMPLE, device=device)[:NLIST]].float()
    for _ in range(ITERS):
        assign = (sample @ F.normalize(centroids, dim=1).half().t()).argmax(dim=1)
        sums = torch.zeros(NLIST, D, device=device).index_add_(0, assign, sample.float())
        counts = torch.zeros(NLIST, device=device).index_add_(0, assign, torch.ones(SAMPLE, device=device))
        centroids = sums / counts.clamp(min=1).unsqueeze(1)
    c16 = F.normalize(centroids, dim=1).half()
    lists = torch.empty(N, dtype=torch.long, device=device)
    for start in range(0, N, CHUNK):
        lists[start : start + CHUNK] = (corpus[start : start + CHUNK] @ c16.t()).argmax(dim=1)
    order = torch.argsort(lists, stable=True)
    sizes = torch.zeros(NLIST, dtype=torch.long, device=device).index_add_(0, lists, torch.ones_like(lists))
print(f"ivf lists {tuple(sizes.shape)} order {tuple(order.shape)} largest {sizes.max().item()}")
if device == "cuda":
    print(
        f"ivf allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
