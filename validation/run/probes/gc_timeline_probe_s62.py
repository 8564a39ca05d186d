"""When CPython's cyclic garbage collector runs in a script, and what CUDA memory each collection frees.

    python3 gc_timeline_probe_s62.py SCRIPT [ARGS...]          (on the GPU)
    vramscope run --gpu h100 gc_timeline_probe_s62.py SCRIPT   (the twin's process, the same lines)

SCRIPT runs in-process as `__main__`. A `gc.callbacks` entry prints one line for every collection that
frees CUDA memory (`torch.cuda.memory_allocated()` read at its start and stop) and for every generation-2
collection; each `torch.cuda.reset_peak_memory_stats()` (the blind scripts' phase boundary) prints
`gc.get_count()` and the collections run so far per generation (`gc.get_stats()`). The script's own
allocations are unchanged: the callback allocates nothing on the device. Written for blind272/jm01-jm03
(session 62, helper jm): both twin misses there are reference cycles freed at another collection.
"""

import gc
import runpy
import sys

import torch

_at_start = [0]
_phase = [0]


def _cb(phase, info):
    if not torch.cuda.is_initialized():
        return
    now = torch.cuda.memory_allocated()
    if phase == "start":
        _at_start[0] = now
        return
    freed = _at_start[0] - now
    if freed or info["generation"] == 2:
        print(
            f"gc phase{_phase[0]} gen{info['generation']} collected {info['collected']} "
            f"freed {freed} alloc {now}",
            flush=True,
        )


def _boundary(original):
    def reset_peak_memory_stats(*args, **kwargs):
        runs = [s["collections"] for s in gc.get_stats()]
        print(f"gc boundary phase{_phase[0]} count {gc.get_count()} collections {runs}", flush=True)
        _phase[0] += 1
        return original(*args, **kwargs)

    return reset_peak_memory_stats


print(
    "gc thresholds",
    gc.get_threshold(),
    "python",
    sys.version.split()[0],
    "torch",
    torch.__version__,
    flush=True,
)
gc.callbacks.append(_cb)
torch.cuda.reset_peak_memory_stats = _boundary(torch.cuda.reset_peak_memory_stats)
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    gc.callbacks.remove(_cb)
