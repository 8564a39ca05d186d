"""When a kernel compiled again is benchmarked again (session 59's probe; written for a GPU run, not
run on one). nocuda_compiled_probe_s59's phase7 peaked 60 MiB (the H200's L2 buffer) over the twin:
its `t * 2` kernel, identical to phase3's, was benchmarked again. Inductor compiles a Triton kernel
in the process until the worker pool's ready job is done (`AsyncCompile.use_process_pool`, started
at the first Inductor compile by `maybe_warm_pool`); there `PyCodeCache.load` gives a source loaded
before its module again, the same CachingAutotuner, whose `precompile` remakes all launchers
(`_make_launchers`): benchmarked again. A worker loads the module afresh and reads the best config
saved by the first benchmark (`check_autotune_cache`): not benchmarked. Each case prints whether
the pool was ready when it compiled, the seconds since the first, and the peak over the live
memory in units of the L2 buffer (1: benchmarked, 0: not):

1. `t * 2` (the first compile: benchmarked);
2. `_add_relu(t * 2, t)`, at once (raises after the mul kernel ran; expected 1 if the pool is not
   ready yet);
3. the same with alpha=2 after `AsyncCompile.wait_pool_ready()` (a worker compiles: expected 0).

Run it twice: as it is, and with TORCHINDUCTOR_COMPILE_THREADS=1 (no workers: 2 and 3 expected 1).
The twin's answer: `GPU=h200 python validation/run_answers.py OUT
validation/run/compile_pool_probe_s59.py` (it cannot know the pool's timing: it takes workers as
ready unless one compile thread is set)."""

import time

import torch
import torch._dynamo
from torch._inductor.async_compile import AsyncCompile

N = 1 << 24
x = torch.randn(N, device="cuda")
l2 = torch.cuda.get_device_properties(0).L2_cache_size // 4 * 4
t0 = None


def phase(name):
    stats = torch.cuda.memory_stats()
    print(
        f"{name} allocated {stats['allocated_bytes.all.current']} reserved "
        f"{stats['reserved_bytes.all.current']} peak {stats['allocated_bytes.all.peak']}"
    )
    torch.cuda.reset_peak_memory_stats()


def case(name, fn):
    global t0
    torch._dynamo.reset()
    ready = AsyncCompile._ready_future is not None and AsyncCompile._ready_future.done()
    live = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    t0 = t0 or start
    try:
        torch.compile(fn)(x)
    except NotImplementedError:
        pass
    extra = torch.cuda.max_memory_allocated() - live - x.numel() * x.element_size()
    print(name, "ready", ready, "at", round(start - t0, 3), "benchmarks", extra // l2)
    phase(name)


phase("setup")
case("mul", lambda t: t * 2)
case("add_relu", lambda t: torch.ops.aten._add_relu(t * 2, t))
AsyncCompile.wait_pool_ready()
case("add_relu_alpha2_pool_ready", lambda t: torch.ops.aten._add_relu(t * 2, t, alpha=2))
