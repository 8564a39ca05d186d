"""Session 70 (helper le): the allocations inside `torch.linalg.lstsq` (CUDA driver gels: geqrf and ormqr
workspaces) that the twin names unmeasured in blind316/le04's linear probe, and a small float32 grid
around it (plain `python3`, one GPU, a few seconds, < 2 GB). For each case: the caching allocator's
alloc/free events inside the call (memory history, sizes in bytes, in order) and the call's peak above
what was allocated before it; the twin prints the same lines.

- le04: `torch.linalg.lstsq` of (32,768, 65) float32 with 32 right-hand sides (geqrf (32768, 65) and
  ormqr (32768, 32, 65) workspaces).
- grid: (32,768, n) float32 with 32 right-hand sides for n = 32, 64, 96, 128 (geqrf of 32 and 64 are in
  `GEQRF_WORKSPACE` already: a check), and n = 65 with 1 and 64 right-hand sides (ormqr's lwork in nrhs).
"""

import torch

dev = "cuda"
torch.manual_seed(0)


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
    print(f"{tag}: peak_above {torch.cuda.max_memory_allocated() - base} events {' '.join(ev)}")
    return out


f32 = torch.float32
# the cuBLAS handle and its workspace first, so that no case below brings them
torch.randn(64, 64, device=dev) @ torch.randn(64, 64, device=dev)

for n, nrhs in ((65, 32), (32, 32), (64, 32), (96, 32), (128, 32), (65, 1), (65, 64)):
    a = torch.randn(32768, n, device=dev, dtype=f32)
    b = torch.randn(32768, nrhs, device=dev, dtype=f32)
    events(f"lstsq (32768, {n}) x {nrhs} float32", lambda a=a, b=b: torch.linalg.lstsq(a, b))
    del a, b
