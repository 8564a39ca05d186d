"""topk with many blocks a slice set and with sorted results longer than 4096, isin on its sorting path,
index_put_(accumulate=True) over large index sets, and multinomial: every allocation and free in order, one
JSON line a case (sweep_case.py). On a GPU:
`python3 topk_isin_sweep.py > fixtures/run/sweeps/topk_isin_h200.jsonl`."""

import torch
from sweep_case import case

dev = "cuda"


def topk(slices, n, k, dtype=torch.float32, is_sorted=True, largest=True):
    x = torch.randn(slices, n, device=dev, dtype=dtype)
    name = f"topk {str(dtype)[6:]} {slices}x{n} k{k} {'sorted' if is_sorted else 'unsorted'}"
    case(
        name + ("" if largest else " smallest"),
        (x,),
        lambda t: torch.topk(t, k, -1, largest, is_sorted),
        True,
    )


for slices, n in [
    (8192, 1024),
    (8193, 1024),
    (9000, 1024),
    (10000, 1024),
    (12000, 1024),
    (16384, 1024),
    (20000, 1024),
    (32768, 1024),
    (50000, 512),
    (65536, 512),
    (100000, 512),
    (131072, 400),
    (262144, 400),
    (524288, 400),
    (1 << 20, 400),
    (4096, 32000),
    (8192, 32000),
]:
    topk(slices, n, 5)
topk(16384, 1024, 20, largest=False)
topk(16384, 1024, 5, torch.bfloat16)
for slices, n, k, s in [
    (1, 1 << 20, 5000, True),
    (1, 1 << 20, 100000, True),
    (1, 1 << 20, 100000, False),
    (4, 1 << 18, 8192, True),
    (64, 32000, 5000, True),
    (1, 1 << 22, 1 << 20, True),
    (1, 100000, 4097, True),
    (2, 50000, 10000, True),
]:
    topk(slices, n, k, is_sorted=s)

for n, m, dtype in [
    (1000, 100, torch.int64),
    (1000, 10000, torch.int64),
    (100000, 1000, torch.int64),
    (100000, 100000, torch.int64),
    (1 << 20, 10000, torch.int64),
    (1 << 20, 1 << 20, torch.int64),
    (100000, 1000, torch.int32),
    (1 << 20, 10000, torch.int32),
]:
    e = torch.randint(0, 4 * n, (n,), device=dev, dtype=dtype)
    t = torch.randint(0, 4 * n, (m,), device=dev, dtype=dtype)
    tag = str(dtype)[6:]
    case(f"isin {tag} {n} in {m}", (e, t), torch.isin, True)
    case(f"isin {tag} {n} in {m} invert", (e, t), lambda a, b: torch.isin(a, b, invert=True), True)
    u = torch.randperm(4 * n, device=dev)[:n].to(dtype)
    w = torch.randperm(4 * n, device=dev)[:m].to(dtype)
    case(
        f"isin {tag} {n} in {m} assume_unique",
        (u, w),
        lambda a, b: torch.isin(a, b, assume_unique=True),
        True,
    )


def index_acc(shape, m, dtype=torch.float32, two=False):
    x = torch.zeros(*shape, device=dev, dtype=dtype)
    if two:
        idx = (torch.randint(0, shape[0], (m,), device=dev), torch.randint(0, shape[1], (m,), device=dev))
        vals = torch.randn(m, *shape[2:], device=dev, dtype=dtype)
    else:
        idx = (torch.randint(0, shape[0], (m,), device=dev),)
        vals = torch.randn(m, *shape[1:], device=dev, dtype=dtype)
    name = f"index_put acc {str(dtype)[6:]} {'x'.join(map(str, shape))} {m}{' two' if two else ''}"
    case(name, (x, idx, vals), lambda a, i, v: a.index_put_(i, v, accumulate=True), True)


for m in (1000, 100000, 327680, 1000000, 4000000):
    index_acc((100000, 64), m)
index_acc((16384, 64), 327680)
index_acc((1000000,), 1000000)
index_acc((100000, 64), 327680, torch.bfloat16)
index_acc((1000, 1000, 16), 100000, two=True)

for rows, n, samples, repl in [
    (8, 151936, 1, False),
    (32, 50257, 1, False),
    (8, 32000, 4, True),
    (1, 1 << 20, 1, False),
    (16, 1000, 10, False),
    (2048, 1000, 1, True),
]:
    p = torch.rand(rows, n, device=dev).softmax(-1)
    case(
        f"multinomial {rows}x{n} {samples} {'repl' if repl else 'norepl'}",
        (p,),
        lambda t, s=samples, r=repl: torch.multinomial(t, s, r),
        True,
    )
