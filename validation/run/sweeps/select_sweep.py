"""The scratch memory of data-dependent selections, swept over sizes and dtypes: `nonzero` (CUB's
DeviceReduce::Sum and DeviceSelect::Flagged buffers around its count and positions), boolean-mask
indexing, `masked_select`, `unique` (sorted, with inverse and counts), `unique_consecutive` and `isin`.
A plain script: on a GPU it prints the GPU's figures, under `vramscope run` the twin's.

    python select_sweep.py > gpu.jsonl             (on the GPU)
    vramscope run --gpu h200 --quiet select_sweep.py > twin.jsonl

One JSON line per case, as scratch_sweep.py writes them: the op's allocations in order (`sizes`, rounded
block sizes; `frees`, the sizes freed in order), and the requested bytes of everything the op allocated
beyond its outputs (`extra_requested`).
"""

import sweep_case
import torch

dev = "cuda"


def case(name, args, op):
    sweep_case.case(name, args, op, frees=True)


def half_set(shape, dt):
    # every other element nonzero: a known count (numel // 2 rounded up), whatever the twin knows
    x = (torch.arange(int(torch.tensor(shape).prod()), device=dev) % 2 == 0).reshape(shape)
    return x.to(dt)


NS = [1, 100, 4096, 4097, 10000, 32768, 65536, 262144, 1 << 20, 3 << 20, 1 << 24]
for dt in (torch.bool, torch.float32, torch.int64, torch.bfloat16):
    for n in NS:
        case(f"nonzero {str(dt)[6:]} {n}", (half_set((n,), dt),), lambda x: torch.nonzero(x))
for shape in ((16384, 2), (64, 4096), (8, 16, 1024)):
    case(f"nonzero bool {shape}", (half_set(shape, torch.bool),), lambda x: torch.nonzero(x))
    case(f"where bool {shape}", (half_set(shape, torch.bool),), lambda x: torch.where(x))
for n in (10000, 1 << 20):
    x = torch.randn(n, 64, device=dev)
    m = half_set((n,), torch.bool)
    case(f"index mask {n}x64", (x, m), lambda x, m: x[m])
    case(f"masked_select {n}x64", (x, m[:, None].expand(n, 64)), lambda x, m: torch.masked_select(x, m))
for n in (1000, 65536, 1 << 20):
    v = (torch.arange(n, device=dev) * 7919) % (n // 4 + 1)
    case(f"unique sorted {n}", (v,), lambda v: torch.unique(v))
    case(
        f"unique inverse counts {n}", (v,), lambda v: torch.unique(v, return_inverse=True, return_counts=True)
    )
    case(f"unique_consecutive {n}", (v.sort().values,), lambda v: torch.unique_consecutive(v))
    case(f"isin {n}", (v, torch.arange(0, n, 3, device=dev)), lambda a, b: torch.isin(a, b))
