"""Clustering on the GPU written by hand: Lloyd's k-means over 2,000,000 points of dimension 128 in fp32
with 1,024 centroids, the assignment step chunked (262,144 points at a time through `torch.cdist` and
`argmin`), the update by `index_add_` of the points and `torch.bincount` of the assignments (minlength =
k, so sizes never follow the data); 5 iterations. Then a spherical (cosine) k-means in fp16 over L2-
normalised points with `mm` and `max`, 5 iterations, and a top-16 nearest-centroid search by `topk` over
a 65,536-point query set.

Phases: the points made on the GPU; Euclidean k-means; cosine k-means and the top-k search. No value-
dependent sizes. 3 phases."""

import torch
import torch.nn.functional as F

torch.manual_seed(2362)
N, D, K, CHUNK = 2_000_000, 128, 1024, 262_144


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


points = torch.randn(N, D, device="cuda")
centroids = points[torch.randperm(N, device="cuda")[:K]].clone()
report("points")

for it in range(5):
    assign = torch.empty(N, dtype=torch.long, device="cuda")
    for start in range(0, N, CHUNK):
        d = torch.cdist(points[start : start + CHUNK], centroids)
        assign[start : start + CHUNK] = d.argmin(1)
        del d
    sums = torch.zeros(K, D, device="cuda").index_add_(0, assign, points)
    counts = torch.bincount(assign, minlength=K).clamp_min(1).unsqueeze(1)
    centroids = sums / counts
    print("iteration", it, centroids.norm().item())
    del sums, counts, assign
report("euclidean kmeans")

unit = F.normalize(points, dim=1).half()
cents = F.normalize(centroids, dim=1).half()
for _ in range(5):
    best = torch.empty(N, dtype=torch.long, device="cuda")
    for start in range(0, N, CHUNK):
        best[start : start + CHUNK] = (unit[start : start + CHUNK] @ cents.T).max(1).indices
    sums = torch.zeros(K, D, device="cuda", dtype=torch.float32).index_add_(0, best, unit.float())
    cents = F.normalize(sums, dim=1).half()
    del sums, best
queries = F.normalize(torch.randn(65536, D, device="cuda"), dim=1).half()
scores, idx = (queries @ cents.T).topk(16, dim=1)
print("topk", tuple(idx.shape), scores.float().mean().item())
report("cosine kmeans and topk")
