"""GPU probe for blind263/jd04's phases 3 and 4 (session 59, helper pr; not run yet).

The H200 ends phase 3 with 14,135,360 more requested bytes than the twin, and peaks in phase 4 at
start + 83,436,032, where the twin's own phase-4 rise over its base is 83,304,512 (memory history):
as if on the H200 phase 3's caches outlive `del caches` to phase 4's peak. Under the twin with
`gc.disable()` phase 3 ends at 605,047,296 allocated (490,260,480 with the collector on; the H200
504,396,288): cyclic garbage holds CUDA tensors here, so the figures hang on when CPython's cyclic
collector runs, which counts the process's own object allocations.

Run: python validation/run/probes/jd04_gc_probe_s59.py
Runs the script unchanged, printing for every collection that frees CUDA memory: the generation,
the bytes freed, objects collected, and the script's line numbers on the stack; and at each report
the collector's counts (gc.get_count())."""

import gc
import os
import runpy
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
d = os.path.join(here, "..", "blind263")
script = os.path.join(d, next(f for f in sorted(os.listdir(d)) if f.startswith("jd04")))
state = {}


def cb(
    phase, info, allocated=torch.cuda.memory_allocated, getframe=sys._getframe, state=state, script=script
):
    # (bound now: at interpreter exit the module's globals are gone before the last collections)
    if phase == "start":
        state["a"] = allocated()
        return
    freed = state.get("a", 0) - allocated()
    if freed:
        f, lines = getframe(1), []
        while f is not None:
            if f.f_code.co_filename == script:
                lines.append(f.f_lineno)
            f = f.f_back
        print(
            f"GC gen{info['generation']} freed {freed} collected {info['collected']} lines {lines}",
            flush=True,
        )


gc.callbacks.append(cb)
_print = print


def traced_print(*a, **k):
    if a and isinstance(a[0], str) and ": peak " in a[0]:
        _print("gc counts", gc.get_count(), flush=True)
    _print(*a, **k)


runpy.run_path(script, init_globals={"print": traced_print}, run_name="__main__")
