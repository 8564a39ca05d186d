"""blind310/ky03's open case (session 71, helper qd): `release_available_cached_blocks` frees a
cached block at least `max_split_size` long with `release_block`, which does not ask whether the
block is a whole segment. ky03's block lay inside its segment (cudaFree refused it: "invalid
argument"); this probe takes the other case, a split segment's *first* block: `cudaFree(block->ptr)`
then succeeds and frees the whole cudaMalloc allocation, tail included, while the allocator's
counters drop by the block alone.

Set-up: a 400 MiB segment split into a free 300 MiB first block and a live 90 MiB tensor in its
tail (made before any `max_split_size_mb`), then `max_split_size_mb:100` at run time, a 420 MiB
per-process limit and a 50 MiB request, which the 300 MiB block may not serve (oversize for a
request under max_split) and the limit forbids a new segment for: the 300 MiB block is released
and the request retried. Lines (the twin prints them too, `vramscope run --gpu h100 --quiet THIS`):
  per mark: allocated, reserved, segments, num_device_free, num_device_alloc, oversize_segments,
  and the driver's used memory over the first mark's (mem_get_info).
  `after_release` decides the rule: the twin (session 71) reads used_delta 52,428,800 (cudaFree of
  the first block frees the whole 400 MiB allocation, the retry takes 50 MiB), where main's twin
  read 157,286,400 (the 300 MiB block alone freed); reserved falls by the block alone in both
  (159,383,552), and oversize_segments reads -1 (the 400 MiB segment, made before max_split_size,
  was never counted; PyTorch's check that a stat stays at or above zero is debug-only).
  `snap` lists the snapshot's segments of 10 MiB or more (the tail's block has a dangling `prev`,
  so PyTorch's snapshot, which walks from segment heads, should no longer show it).
The process ends with `os._exit(0)`: freeing the tail (its `prev` names a deleted Block) is
undefined.

Run on the GPU:  python3 validation/run/probes/qd71_split_segment_first_block_release_probe.py
"""

import os

import torch

MiB = 1 << 20
dev = "cuda"
torch.zeros(1, device=dev)
base = None


def line(tag):
    global base
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    used = total - free
    if base is None:
        base = used
    print(
        tag,
        s["allocated_bytes.all.current"],
        s["reserved_bytes.all.current"],
        s["segment.all.current"],
        s["num_device_free"],
        s["num_device_alloc"],
        s["oversize_segments.current"],
        "used_delta",
        used - base,
        flush=True,
    )


line("start")
x = torch.empty(400 * MiB, dtype=torch.uint8, device=dev)
del x
a = torch.empty(300 * MiB, dtype=torch.uint8, device=dev)
b = torch.empty(90 * MiB, dtype=torch.uint8, device=dev)
line("split")
del a
line("first_freed")
torch.cuda.memory._set_allocator_settings("max_split_size_mb:100")
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(420 * MiB / total)
try:
    c = torch.empty(50 * MiB, dtype=torch.uint8, device=dev)
    line("after_release")
except Exception as e:  # the probe reports whatever is raised
    print("EXC", type(e).__name__, str(e).splitlines()[0][:100], flush=True)
    line("after_exception")
snap = sorted(
    (seg["total_size"], tuple((bl["size"], bl["state"]) for bl in seg["blocks"]))
    for seg in torch.cuda.memory_snapshot()
    if seg["total_size"] >= MiB * 10
)
print("snap", snap, flush=True)
os._exit(0)
