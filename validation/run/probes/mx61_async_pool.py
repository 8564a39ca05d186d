"""Session 61 (helper mx): `backend:cudaMallocAsync`'s pool seen by `torch.cuda.mem_get_info()` and
where the live blocks' spread over the pool's 32 MiB granules holds more than their sum needs.

Run on the GPU, alone on it (`cudaMemGetInfo` is the device's: another process moves `other`):

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python validation/run/probes/mx61_async_pool.py

The twin: `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync vramscope run --gpu h200 --quiet THIS`.

Each line is `CASE step: allocated A reserved R other_delta D` (MiB = 2**20 bytes, figures in
bytes): A = memory_allocated(), R = memory_reserved(), D = (total - free) - R from mem_get_info(),
less the same at the script's first line. Every case starts with nothing alive and a trim
(`empty_cache`), then a `reset_peak_memory_stats`.

What the source settles (c10/cuda/CUDAMallocAsyncAllocator.cpp, 2.11): `mem_get_info` is
`cudaMemGetInfo`, the device's; `lazy_init_device` sets the default pool's release threshold to
UINT64_MAX, so what the pool reserved stays mapped until `empty_cache` (`cudaMemPoolTrimTo(pool,
0)`) and nothing else of the process moves: **D is 0 on every line** (session 60's H200 showed it
for 32 -> 128 MiB: used memory +96 MiB). A is the bytes requested (H200, session 60).

What it does not settle: how the driver places sub-allocations in the pool and which granules a
trim can unmap (closed source). The twin reserves the most alive since the last trim, rounded up
to 32 MiB. The GPU's R where it differs is the measurement this probe is for:
- `sizes`: one block of 33 MiB, 65 MiB, 1 GiB + 1 B alone (twin: 64 MiB, 96 MiB, 1056 MiB; a
  coarser granule for large blocks would show here);
- `holes`: three 20 MiB blocks, the first and last freed, a trim (twin 32 MiB; 64 MiB if the
  pool packs them in order and the live middle one, at 20-40 MiB, keeps both granules it touches);
- `misfit`: 20 MiB, then 10 MiB, the 20 MiB freed, then 24, 16 and 12 MiB (twin: 64 MiB after the
  24 and after the 12, 62 MiB alive; 96 MiB at the 12 if the pool packs first-fit, whose holes of
  4 and 10 MiB cannot take it);
- `reuse`: 8 MiB blocks x 8 alive (64 MiB), every other freed, then one 30 MiB block (twin 64 MiB:
  62 MiB alive at most; 96 MiB if the freed 8 MiB holes are not joined to take it).

The twin's lines (mx-s61, the command above; `other_delta` 0 on every line; on stderr it warns once
that the pool's reserved memory is taken as the most alive since the trim in 32 MiB granules):

start nothing: allocated 0 reserved 0 other_delta 0
start 1 B: allocated 1 reserved 33554432 other_delta 0
start trim: allocated 0 reserved 0 other_delta 0
sizes 34603008 alive: allocated 34603008 reserved 67108864 other_delta 0
sizes 34603008 freed: allocated 0 reserved 67108864 other_delta 0
sizes 68157440 alive: allocated 68157440 reserved 100663296 other_delta 0
sizes 68157440 freed: allocated 0 reserved 100663296 other_delta 0
sizes 1073741825 alive: allocated 1073741825 reserved 1107296256 other_delta 0
sizes 1073741825 freed: allocated 0 reserved 1107296256 other_delta 0
sizes trim: allocated 0 reserved 0 other_delta 0
holes three 20 MiB: allocated 62914560 reserved 67108864 other_delta 0
holes first and last freed: allocated 20971520 reserved 67108864 other_delta 0
holes trim: allocated 20971520 reserved 33554432 other_delta 0
holes all freed, trim: allocated 0 reserved 0 other_delta 0
misfit 20 + 10 MiB: allocated 31457280 reserved 33554432 other_delta 0
misfit 20 MiB freed: allocated 10485760 reserved 33554432 other_delta 0
misfit 24 MiB: allocated 35651584 reserved 67108864 other_delta 0
misfit 16 MiB: allocated 52428800 reserved 67108864 other_delta 0
misfit 12 MiB: allocated 65011712 reserved 67108864 other_delta 0
misfit all freed, trim: allocated 0 reserved 0 other_delta 0
reuse 8 x 8 MiB: allocated 67108864 reserved 67108864 other_delta 0
reuse every other freed: allocated 33554432 reserved 67108864 other_delta 0
reuse 30 MiB: allocated 65011712 reserved 67108864 other_delta 0
reuse all freed, trim: allocated 0 reserved 0 other_delta 0
"""

import os

import torch

MiB = 1 << 20
assert "cudaMallocAsync" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "set the backend"
assert torch.cuda.memory.get_allocator_backend() == "cudaMallocAsync"
dev = torch.device("cuda")
_base = []


def line(case, step):
    free, total = torch.cuda.mem_get_info()
    r = torch.cuda.memory_reserved()
    other = total - free - r
    if not _base:
        _base.append(other)
    print(
        f"{case} {step}: allocated {torch.cuda.memory_allocated()} reserved {r} "
        f"other_delta {other - _base[0]}",
        flush=True,
    )


def block(n):
    return torch.empty(n, dtype=torch.uint8, device=dev)


def start():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


torch.cuda.init()
start()
line("start", "nothing")
a = block(1)
line("start", "1 B")
del a
start()
line("start", "trim")

for n in (33 * MiB, 65 * MiB, (1 << 30) + 1):
    start()
    x = block(n)
    line("sizes", f"{n} alive")
    del x
    line("sizes", f"{n} freed")
start()
line("sizes", "trim")

a, b, c = block(20 * MiB), block(20 * MiB), block(20 * MiB)
line("holes", "three 20 MiB")
del a, c
line("holes", "first and last freed")
start()
line("holes", "trim")
del b
start()
line("holes", "all freed, trim")

x, y = block(20 * MiB), block(10 * MiB)
line("misfit", "20 + 10 MiB")
del x
line("misfit", "20 MiB freed")
z = block(24 * MiB)
line("misfit", "24 MiB")
w = block(16 * MiB)
line("misfit", "16 MiB")
e = block(12 * MiB)
line("misfit", "12 MiB")
del y, z, w, e
start()
line("misfit", "all freed, trim")

blocks = [block(8 * MiB) for _ in range(8)]
line("reuse", "8 x 8 MiB")
del blocks[1::2]
line("reuse", "every other freed")
big = block(30 * MiB)
line("reuse", "30 MiB")
del blocks, big
start()
line("reuse", "all freed, trim")
