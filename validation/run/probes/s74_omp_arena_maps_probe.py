"""Session 74 probe: where OpenMP's arenas lie when the pool starts before the CUDA context (driver rule 17).

blind224/hp01 (H200) is exact in every phase with its five arenas (the workers that took a share of the
pool's first loop, a 196,608-element `clone`) packed by glibc's hint (`VRAMSCOPE_ARENAS_PACKED=5`), and in
none laid out 128 MiB apart as jj04's fifteen are; blind333/lv01 (eleven shares) reads the same either way.
This probe runs a script as `__main__` (as record.py does) and prints the process's anonymous mappings of
1 MiB or more (no files) at the context's creation (before and after `torch.cuda._lazy_init`), at each
`reset_peak_memory_stats` and at the end, with the task count, then the segments in creation order: the
arenas' addresses and gaps against B (the first segment + 2 MiB) settle packed or apart.

    cd validation/run && python3 probes/s74_omp_arena_maps_probe.py blind224/hp01_*.py   (GPU; as long as
    the script; `CONTEXT=none` memory history on, as history.py records it)"""

import os
import runpy
import sys

import torch

MIB = 1 << 20
views = []


def read_maps():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            name = parts[5] if len(parts) > 5 else ""
            if hi - lo >= MIB and not name.startswith("/"):
                out.append((lo, hi, parts[1], name or "anon"))
    return out


def view(tag):
    views.append((tag, read_maps(), len(os.listdir("/proc/self/task"))))


if torch.cuda.is_available():
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)
    _lazy_init = torch.cuda._lazy_init

    def _traced_lazy_init():
        if not torch.cuda.is_initialized():
            view("before the context")
            _lazy_init()
            view("after the context")
        else:
            _lazy_init()

    torch.cuda._lazy_init = _traced_lazy_init
    _reset = torch.cuda.reset_peak_memory_stats

    def _traced_reset(*args, **kwargs):
        view(f"reset {sum(t.startswith('reset') for t, _, _ in views)}")
        return _reset(*args, **kwargs)

    torch.cuda.reset_peak_memory_stats = _traced_reset

script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    view("end")
    segs = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for e in torch.cuda.memory._snapshot()["device_traces"][0]:
            if e["action"] == "segment_alloc":
                segs.append((e["addr"], e["size"]))
    base = segs[0][0] + 2 * MIB if segs else 0
    print(f"B {base:#x}, torch threads {torch.get_num_threads()}")
    for tag, maps, tasks in views:
        print(f"== {tag}: tasks {tasks}")
        prev = None
        for lo, hi, perm, name in maps:
            gap = (lo - prev) / MIB if prev is not None else 0.0
            print(f"  B{(lo - base) / MIB:+12.2f} len {(hi - lo) / MIB:9.3f} gap {gap:9.3f} {perm} {name}")
            prev = hi
    print("segments in creation order (B offset MiB, MiB):")
    print([(f"{(a - base) / MIB:+.0f}", n // MIB) for a, n in segs])
