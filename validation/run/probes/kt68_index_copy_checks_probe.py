"""index_copy(_)'s META checks on the GPU (session 68, helper kt): for each refused call, the exception's
type and message, and the peak allocated over it (the out-of-place op's result is made before the checks,
the exception frees it). Twin: `vramscope run --gpu h100 kt68_index_copy_checks_probe.py` prints the same."""

import torch

cache = torch.zeros(2, 4, 64, 128, device="cuda", dtype=torch.bfloat16)
pos = torch.tensor([3], device="cuda")
keys = torch.zeros(2, 4, 1, 128, device="cuda")
new = torch.zeros(2, 4, 1, 128, device="cuda", dtype=torch.bfloat16)
cases = [
    ("dtype", 2, pos, keys),
    ("int index", 2, pos.int(), new),
    ("slice", 2, pos, new[:, :2]),
    ("count", 2, torch.tensor([3, 4], device="cuda"), new),
    ("cpu index", 2, torch.tensor([3]), new),
]
for inplace in (True, False):
    for name, dim, index, source in cases:
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        try:
            if inplace:
                cache.index_copy_(dim, index, source)
            else:
                torch.index_copy(cache, dim, index, source)
            outcome = "ok"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}".splitlines()[0]
        peak = torch.cuda.max_memory_allocated() - before
        print(f"{'inplace' if inplace else 'out-of-place'} {name}: {outcome} | peak +{peak}")
