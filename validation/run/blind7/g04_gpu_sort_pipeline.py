"""A data pipeline on the GPU: 8M scores sorted (values and the permutation), ranks by an inverse
permutation, a running sum of int32 counts (promoted to int64), a histogram by
`index_put_(accumulate=True)` into 65,536 bins, per-row sorting of a (48, 200000) score matrix, and a
bf16 cumulative sum; each stage a phase."""

import os

import torch

N, ROWS, COLS = (5000, 4, 5000) if os.environ.get("SMOKE") else (8_000_000, 48, 200_000)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(704)


def phase(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


scores = torch.rand(N, device=device)
values, order = torch.sort(scores, descending=True)
ranks = torch.empty_like(order)
ranks[order] = torch.arange(N, device=device)
phase("sort")
counts = torch.randint(0, 5, (N,), device=device, dtype=torch.int32)
offsets = torch.cumsum(counts, 0)
phase("cumsum")
hist = torch.zeros(65536, device=device)
bins = torch.randint(0, 65536, (N,), device=device)
hist.index_put_((bins,), torch.ones(N, device=device), accumulate=True)
phase("histogram")
matrix = torch.randn(ROWS, COLS, device=device)
top = torch.sort(matrix, dim=-1, descending=True).values[:, :100]
phase("row sort")
smooth = torch.cumsum(scores.to(torch.bfloat16), 0)
phase("bf16 cumsum")
print(values.shape, ranks.shape, offsets.shape, hist.shape, top.shape, smooth.shape)
