"""Session 70 (helper li): the allocations inside blind320/li02's `torch.linalg.lstsq` calls (the
efficient-KAN grid update's "curve2coeff": batches of (4,096, 11) float32 bases against 256, 64 and
1 right-hand sides; more than 256 rows, so `gels_looped`: geqrf, ormqr and trsm per the batch). Plain
`python3`, one GPU, a few seconds, < 2 GB. For each case: the caching allocator's alloc/free events
inside the call (memory history, sizes in bytes, in order; a run of one repeated event or pair of
events written `(...)xN`) and the call's peak above what was allocated before it. Decides
GEQRF_WORKSPACE[(4096, 11, float32)] and ORMQR_WORKSPACE[(4096, nrhs, 11, float32)] for nrhs 256,
64 and 1 (python/vramscope/_linalg.py), and whether the per-matrix loop is as the twin has it.
"""

import torch

dev = "cuda"
torch.manual_seed(0)


def rle(tokens):
    out, i = [], 0
    while i < len(tokens):
        for p in (1, 2):
            unit = tokens[i : i + p]
            r = 1
            while tokens[i + r * p : i + (r + 1) * p] == unit and len(unit) == p:
                r += 1
            if r >= 3:
                out.append(f"({' '.join(unit)})x{r}")
                i += p * r
                break
        else:
            out.append(tokens[i])
            i += 1
    return " ".join(out)


def events(tag, fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            ev.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            ev.append(f"-{e['size']}")
    print(f"{tag}: peak_above {torch.cuda.max_memory_allocated() - base} events {rle(ev)}")
    return out


# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)

for batch, nrhs in ((8, 256), (256, 256), (256, 64), (64, 1)):
    a = torch.rand(batch, 4096, 11, device=dev)
    b = torch.randn(batch, 4096, nrhs, device=dev)
    events(
        f"lstsq A ({batch}, 4096, 11) B ({batch}, 4096, {nrhs}) float32",
        lambda a=a, b=b: torch.linalg.lstsq(a, b),
    )
    del a, b
