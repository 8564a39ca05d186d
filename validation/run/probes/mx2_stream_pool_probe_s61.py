"""Session 61 (helper mx2): what splits the 70 MiB that `backend:cudaMallocAsync`'s first allocation
takes beyond the pool on the H100 (fixtures/run/probes/mx61_async_pool_h100.txt, `other_delta`
73,400,320). `lazy_init_device` (CUDAMallocAsyncAllocator.cpp, 2.11) sets the default pool's
attributes and calls `getStreamFromPool()`, whose first call on a device creates its stream pools
(CUDAStream.cpp `initDeviceStreamState`: 32 streams per priority, up to 4 priorities). If the
streams hold the memory, the native backend's first `torch.cuda.Stream()` holds it too (the twin
takes nothing there).

Run on the GPU, alone on it, each case a fresh process (this script starts them):

    python3 validation/run/probes/mx2_stream_pool_probe_s61.py

Each line: `CASE step: other D` with D = total - free - memory_reserved() (bytes) less the same
at the case's first line.
"""

import os
import subprocess
import sys

CASES = {
    # native backend: a side stream, then a second, then one of high priority, then 1 B
    "native_stream": ("", "stream stream hipri alloc"),
    # native backend: 1 B first, then a side stream
    "native_alloc_first": ("", "alloc stream"),
    # cudaMallocAsync: a side stream first (the stream pools made), then 1 B (the pool's setup alone)
    "async_stream_first": ("backend:cudaMallocAsync", "stream alloc alloc2"),
    # cudaMallocAsync: 1 B first (as mx61_async_pool.py), then a side stream
    "async_alloc_first": ("backend:cudaMallocAsync", "alloc stream"),
}


def child(steps):
    import torch

    torch.cuda.init()
    torch.cuda.synchronize()
    base = []
    keep = []

    def line(step):
        free, total = torch.cuda.mem_get_info()
        other = total - free - torch.cuda.memory_reserved()
        if not base:
            base.append(other)
        print(f"{sys.argv[2]} {step}: other {other - base[0]}", flush=True)

    line("start")
    try:
        lo, hi = torch.cuda.Stream.priority_range()
        print(f"{sys.argv[2]} priority_range: {lo} {hi}", flush=True)
    except Exception as e:
        print(f"{sys.argv[2]} priority_range: {type(e).__name__}", flush=True)
    line("after priority_range")
    for s in steps.split():
        if s == "stream":
            keep.append(torch.cuda.Stream())
        elif s == "hipri":
            keep.append(torch.cuda.Stream(priority=-1))
        elif s in ("alloc", "alloc2"):
            keep.append(torch.empty(1, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        line(s)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[3])
        sys.exit(0)
    for name, (conf, steps) in CASES.items():
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
        r = subprocess.run(
            [sys.executable, __file__, "--child", name, steps],
            env=env,
            capture_output=True,
            text=True,
        )
        sys.stdout.write(r.stdout)
        if r.returncode:
            print(f"{name} rc {r.returncode}: {r.stderr.strip().splitlines()[-1:]}", flush=True)
