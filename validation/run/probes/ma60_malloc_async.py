"""Session 60 (helper ma): what PyTorch 2.11 reports under the allocator settings the twin did not
model: `backend:cudaMallocAsync` (c10/cuda/CUDAMallocAsyncAllocator.cpp) and the caching host
allocator's `pinned_*` keys (aten/src/ATen/cuda/CachingHostAllocator.cpp).

Run on the GPU (every case in a fresh process, its PYTORCH_CUDA_ALLOC_CONF set before CUDA starts):

    python validation/run/probes/ma60_malloc_async.py > ma60.out 2>&1

(one case: `MA60_CASE=async PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync python THIS`). Each line is
`CASE step: figures`; a UserWarning's text follows `warning:`.

What settles what:
- async: whether memory_allocated() (the pool's UsedMemCurrent) is the bytes requested summed (the
  twin's exact figure) or the driver's granularity shows in it (the sizes 1, 512, 513, 4096, 1 MiB+1,
  2 MiB+1, 3 MiB+1 step it); memory_reserved() (ReservedMemCurrent): the driver's pool granularity,
  which the twin names unmeasured, giving the most allocated since the last empty_cache instead;
  every other memory_stats key zero; mem_get_info; snapshot / history raise.
- async_oom: the fraction's limit on the bytes requested and mallocAsync's message.
- async_keys: the settings warning of a native allocator's key with backend:cudaMallocAsync.
- pinned_*: host_memory_stats() (num_host_alloc / num_host_free are blocks, host_alloc_time.count /
  host_free_time.count the cudaHostAlloc / cudaFreeHost calls) under each pinned key.

The twin's lines (helper ma's branch ma-s60, `bash` loop over the cases of CASES:
`MA60_CASE=C PYTORCH_CUDA_ALLOC_CONF=CONF vramscope run --gpu h200 --quiet THIS`; the twin's warnings
go to stderr, shown as `C stderr:`; the `all stats` line left out: every key of memory_stats() zero
but the six named; long lines continued after two spaces). Figures the twin names unmeasured: under
backend:cudaMallocAsync `reserved`, `peak_reserved` and `mem_get_info_used` (the driver's pool);
`allocated` is exact only if the pool's UsedMemCurrent is the bytes requested summed.

== async: PYTORCH_CUDA_ALLOC_CONF='backend:cudaMallocAsync'
async setup: backend cudaMallocAsync fraction 122888273.81
async stderr: vramscope: warning: backend:cudaMallocAsync: reserved memory is the driver's pool, not
  modelled (the twin gives the most allocated since the last empty_cache); memory_allocated() is taken as
  the bytes requested
async alloc 1: allocated 1 reserved 1 mem_get_info_used 556597248
async alloc 512: allocated 513 reserved 513 mem_get_info_used 556597248
async alloc 513: allocated 1026 reserved 1026 mem_get_info_used 556597248
async alloc 4096: allocated 5122 reserved 5122 mem_get_info_used 556597248
async alloc 1048577: allocated 1053699 reserved 1053699 mem_get_info_used 577568768
async alloc 2097153: allocated 3150852 reserved 3150852 mem_get_info_used 577568768
async alloc 3145729: allocated 6296581 reserved 6296581 mem_get_info_used 577568768
async free half: allocated 4194820 reserved 6296581 mem_get_info_used 577568768 peak 6296581 peak_reserved
  6296581
async empty_cache: allocated 4194820 reserved 4194820 mem_get_info_used 577568768 peak 6296581 peak_reserved
   6296581
async reset_peak: peak 4194820 peak_reserved 4194820
async alloc 100MiB: allocated 109052420 reserved 109052420 mem_get_info_used 682426368
async free 100MiB: allocated 4194820 reserved 109052420 mem_get_info_used 682426368
async nonzero keys: active_bytes.all.current active_bytes.all.peak allocated_bytes.all.current
  allocated_bytes.all.peak reserved_bytes.all.current reserved_bytes.all.peak
async max_split_size: 0
async snapshot: RuntimeError Calling snapshot with backend:cudaMallocAsync is not meaningful. (For
  backend:native, snapshot returns a detailed summary of all blocks tracked by the allocator, but the
  cudaMallocAsync backend does not track individual blocks.)
async history: RuntimeError cudaMallocAsync does not yet support recordHistory. If you need it, please file
  an issue describing your use case.
async reset_accumulated: ['warning: For backend:cudaMallocAsync, resetAccumulatedStats has no effect.']
== async_oom: PYTORCH_CUDA_ALLOC_CONF='backend:cudaMallocAsync'
async_oom fraction: 0.0009999999978682283 limit 150109880
async_oom stderr: vramscope: warning: backend:cudaMallocAsync: reserved memory is the driver's pool, not
  modelled (the twin gives the most allocated since the last empty_cache); memory_allocated() is taken as
  the bytes requested
async_oom: OutOfMemoryError Allocation on device 0 would exceed allowed memory. (out of memory) / Currently
  allocated     : 143.16 MiB / Requested               : 1 bytes / Device limit            : 139.80 GiB /
  Free (according to CUDA): 139.14 GiB / PyTorch limit (set by user-supplied memory fraction) /
                           : 143.16 MiB
async_oom num_ooms 0 allocated 150109880
== async_keys: PYTORCH_CUDA_ALLOC_CONF='backend:cudaMallocAsync,pinned_num_register_threads:8'
async_keys stderr: vramscope: warning: backend:cudaMallocAsync: reserved memory is the driver's pool, not
  modelled (the twin gives the most allocated since the last empty_cache); memory_allocated() is taken as
  the bytes requested
async_keys: ['warning: backend:cudaMallocAsync ignores max_split_size_mb,roundup_power2_divisions, and
  garbage_collect_threshold.']
== pinned_default: PYTORCH_CUDA_ALLOC_CONF=''
pinned_default after a,b: num_host_alloc 2 num_host_free 0 allocated_bytes 4325376 active_bytes 4325376
  alloc_calls 2 free_calls 0
pinned_default after a copy's block freed and asked again: num_host_alloc 2 num_host_free 0 allocated_bytes
  4325376 active_bytes 4325376 alloc_calls 2 free_calls 0
pinned_default after empty: num_host_alloc 2 num_host_free 2 allocated_bytes 0 active_bytes 0 alloc_calls 2
  free_calls 2
pinned_default after c: num_host_alloc 3 num_host_free 2 allocated_bytes 131072 active_bytes 131072
  alloc_calls 3 free_calls 2
== pinned_reserve: PYTORCH_CUDA_ALLOC_CONF='pinned_reserve_segment_size_mb:4'
pinned_reserve after a,b: num_host_alloc 2 num_host_free 0 allocated_bytes 4325376 active_bytes 4325376
  alloc_calls 2 free_calls 0
pinned_reserve after a copy's block freed and asked again: num_host_alloc 2 num_host_free 0 allocated_bytes
  4325376 active_bytes 4325376 alloc_calls 2 free_calls 0
pinned_reserve after empty: num_host_alloc 2 num_host_free 2 allocated_bytes 0 active_bytes 0 alloc_calls 2
  free_calls 1
pinned_reserve after c: num_host_alloc 3 num_host_free 2 allocated_bytes 131072 active_bytes 131072
  alloc_calls 2 free_calls 1
== pinned_register: PYTORCH_CUDA_ALLOC_CONF='pinned_use_cuda_host_register:True'
pinned_register stderr: vramscope: warning: pinned_use_cuda_host_register: the pinned blocks' glibc mappings
   are not laid out in the address space
pinned_register after a,b: num_host_alloc 2 num_host_free 0 allocated_bytes 4325376 active_bytes 4325376
  alloc_calls 2 free_calls 0
pinned_register after a copy's block freed and asked again: num_host_alloc 2 num_host_free 0 allocated_bytes
   4325376 active_bytes 4325376 alloc_calls 2 free_calls 0
pinned_register after empty: num_host_alloc 2 num_host_free 2 allocated_bytes 0 active_bytes 0 alloc_calls 2
   free_calls 2
pinned_register after c: num_host_alloc 3 num_host_free 2 allocated_bytes 131072 active_bytes 131072
  alloc_calls 3 free_calls 2
== pinned_register_threads:
  PYTORCH_CUDA_ALLOC_CONF='pinned_use_cuda_host_register:True,pinned_num_register_threads:8'
pinned_register_threads stderr: vramscope: warning: pinned_use_cuda_host_register: the pinned blocks' glibc
  mappings are not laid out in the address space
pinned_register_threads after a,b: num_host_alloc 2 num_host_free 0 allocated_bytes 4325376 active_bytes
  4325376 alloc_calls 2 free_calls 0
pinned_register_threads after a copy's block freed and asked again: num_host_alloc 2 num_host_free 0
  allocated_bytes 4325376 active_bytes 4325376 alloc_calls 2 free_calls 0
pinned_register_threads after empty: num_host_alloc 2 num_host_free 2 allocated_bytes 0 active_bytes 0
  alloc_calls 2 free_calls 2
pinned_register_threads after c: num_host_alloc 3 num_host_free 2 allocated_bytes 131072 active_bytes 131072
   alloc_calls 3 free_calls 2
== pinned_background: PYTORCH_CUDA_ALLOC_CONF='pinned_use_background_threads:True'
pinned_background stderr: vramscope: warning: pinned_use_background_threads: a pinned block freed after
  feeding a copy is taken as reusable by the next request, as without the background thread
pinned_background after a,b: num_host_alloc 2 num_host_free 0 allocated_bytes 4325376 active_bytes 4325376
  alloc_calls 2 free_calls 0
pinned_background after a copy's block freed and asked again: num_host_alloc 2 num_host_free 0
  allocated_bytes 4325376 active_bytes 4325376 alloc_calls 2 free_calls 0
pinned_background after empty: num_host_alloc 2 num_host_free 2 allocated_bytes 0 active_bytes 0 alloc_calls
   2 free_calls 2
pinned_background after c: num_host_alloc 3 num_host_free 2 allocated_bytes 131072 active_bytes 131072
  alloc_calls 3 free_calls 2
"""

import os
import subprocess
import sys
import warnings

CASES = {
    "async": "backend:cudaMallocAsync",
    "async_oom": "backend:cudaMallocAsync",
    "async_keys": "backend:cudaMallocAsync,pinned_num_register_threads:8",
    "pinned_default": "",
    "pinned_reserve": "pinned_reserve_segment_size_mb:4",
    "pinned_register": "pinned_use_cuda_host_register:True",
    "pinned_register_threads": "pinned_use_cuda_host_register:True,pinned_num_register_threads:8",
    "pinned_background": "pinned_use_background_threads:True",
}


def figures(case, step, extra=""):
    import torch

    a, r = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    free, total = torch.cuda.mem_get_info()
    print(f"{case} {step}: allocated {a} reserved {r} mem_get_info_used {total - free}{extra}", flush=True)


def run_async(case):
    import torch

    print(
        f"{case} setup: backend {torch.cuda.get_allocator_backend()} "
        f"fraction {torch.cuda.get_per_process_memory_fraction():.2f}",
        flush=True,
    )
    held = []
    for n in (1, 512, 513, 4096, (1 << 20) + 1, (2 << 20) + 1, (3 << 20) + 1):
        held.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        figures(case, f"alloc {n}")
    del held[1::2]
    torch.cuda.synchronize()
    figures(
        case,
        "free half",
        f" peak {torch.cuda.max_memory_allocated()} peak_reserved {torch.cuda.max_memory_reserved()}",
    )
    torch.cuda.empty_cache()
    figures(
        case,
        "empty_cache",
        f" peak {torch.cuda.max_memory_allocated()} peak_reserved {torch.cuda.max_memory_reserved()}",
    )
    torch.cuda.reset_peak_memory_stats()
    print(
        f"{case} reset_peak: peak {torch.cuda.max_memory_allocated()} "
        f"peak_reserved {torch.cuda.max_memory_reserved()}",
        flush=True,
    )
    # a tensor of 100 MiB after the trim, freed: how much the pool keeps
    x = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
    figures(case, "alloc 100MiB")
    del x
    torch.cuda.synchronize()
    figures(case, "free 100MiB")
    s = torch.cuda.memory_stats()
    print(f"{case} nonzero keys: {' '.join(k for k, v in s.items() if v)}", flush=True)
    print(f"{case} max_split_size: {s.get('max_split_size')}", flush=True)
    print(f"{case} all stats: {dict(s)}", flush=True)
    for name, fn in (
        ("snapshot", torch.cuda.memory_snapshot),
        ("history", torch.cuda.memory._record_memory_history),
    ):
        try:
            fn()
            print(f"{case} {name}: returned", flush=True)
        except Exception as e:  # (what it raises is the point)
            print(f"{case} {name}: {type(e).__name__} {str(e).splitlines()[0]}", flush=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.cuda.reset_accumulated_memory_stats()
    print(f"{case} reset_accumulated: {[f'warning: {x.message}' for x in w]}", flush=True)


def run_async_oom(case):
    import torch

    torch.cuda.set_per_process_memory_fraction(0.001)
    total = torch.cuda.get_device_properties(0).total_memory
    limit = int(0.001 * total)
    print(f"{case} fraction: {torch.cuda.get_per_process_memory_fraction()} limit {limit}", flush=True)
    a = torch.empty(limit - 10, dtype=torch.uint8, device="cuda")
    b = torch.empty(10, dtype=torch.uint8, device="cuda")
    try:
        torch.empty(1, dtype=torch.uint8, device="cuda")
        print(f"{case}: no error", flush=True)
    except torch.OutOfMemoryError as e:
        print(f"{case}: OutOfMemoryError {' / '.join(str(e).splitlines())}", flush=True)
    s = torch.cuda.memory_stats()
    print(f"{case} num_ooms {s.get('num_ooms')} allocated {torch.cuda.memory_allocated()}", flush=True)
    del a, b


def run_async_keys(case):
    import torch

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.empty(1, device="cuda")
    print(f"{case}: {[f'warning: {x.message}' for x in w]}", flush=True)


def host(case, step):
    import torch

    s = torch.cuda.host_memory_stats()
    print(
        f"{case} {step}: num_host_alloc {s['num_host_alloc']} num_host_free {s['num_host_free']} "
        f"allocated_bytes {s['allocated_bytes.current']} active_bytes {s['active_bytes.current']} "
        f"alloc_calls {s['host_alloc_time.count']} free_calls {s['host_free_time.count']}",
        flush=True,
    )


def run_pinned(case):
    import torch

    torch.zeros(1, device="cuda")
    a = torch.empty(100_000, dtype=torch.uint8, pin_memory=True)
    b = torch.empty(3 << 20, dtype=torch.uint8, pin_memory=True)
    host(case, "after a,b")
    # a copy fed by a pinned block, then the block freed: reused by the next request?
    d = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    d.copy_(b, non_blocking=True)
    del b
    b2 = torch.empty(3 << 20, dtype=torch.uint8, pin_memory=True)
    host(case, "after a copy's block freed and asked again")
    torch.cuda.synchronize()
    del a, b2
    torch._C._host_emptyCache()
    host(case, "after empty")
    c = torch.empty(100_000, dtype=torch.uint8, pin_memory=True)
    host(case, "after c")
    del c, d


def child(case):
    {"async": run_async, "async_oom": run_async_oom, "async_keys": run_async_keys}.get(case, run_pinned)(case)


if __name__ == "__main__":
    case = os.environ.get("MA60_CASE")
    if case:
        child(case)
        sys.exit(0)
    for case, conf in CASES.items():
        env = dict(os.environ, MA60_CASE=case, PYTORCH_CUDA_ALLOC_CONF=conf)
        env.pop("PYTORCH_ALLOC_CONF", None)
        print(f"== {case}: PYTORCH_CUDA_ALLOC_CONF={conf!r}", flush=True)
        r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        for line in r.stderr.splitlines():
            print(f"{case} stderr: {line}", flush=True)
        print(f"{case} rc {r.returncode}", flush=True)
