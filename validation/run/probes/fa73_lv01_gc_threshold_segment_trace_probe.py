"""blind333/lv01's allocator trace on the GPU: where the garbage-collection threshold's segment frees
part from the twin's. lv01 (gc disabled, traces freed by `gc.collect()`,
`garbage_collection_threshold:0.5,max_split_size_mb:96`, memory fraction 0.1) reads the H100's figures in
phases 0 and 1 and misses reserved from phase 2 (-1.14 GB at its end), where only the segments the
collection frees can differ (allocated is exact in every phase). This runs the blind script unchanged
(runpy, as record.py does) with the allocator's history on (no stacks: `context=None`) and prints, at
each `gc.collect()` and `reset_peak_memory_stats()` of the script, one line with the segment
allocations (A) and frees (F) since the previous line, in MiB, then reserved and the device frees:

    FA73 <n> <what> reserved=<bytes> frees=<num_device_free> segs: A94 A2 F72 ...

    python3 probes/fa73_lv01_gc_threshold_segment_trace_probe.py         (validation/run; < 30 s, < 9 GB)"""

import gc
import glob
import os
import runpy

# the script's own setting, before torch is imported (the history call below starts the allocator)
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.5,max_split_size_mb:96"
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = glob.glob(os.path.join(HERE, "..", "blind333", "lv01_*.py"))[0]
seen = [0, 0]


def mark(what):
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    segs = [
        ("A" if e["action"] == "segment_alloc" else "F") + str(e["size"] >> 20)
        for e in trace[seen[0] :]
        if e["action"] in ("segment_alloc", "segment_free")
    ]
    seen[0] = len(trace)
    seen[1] += 1
    st = torch.cuda.memory_stats()
    print(
        f"FA73 {seen[1]} {what} reserved={st['reserved_bytes.all.current']} "
        f"frees={st['num_device_free']} segs: {' '.join(segs)}",
        flush=True,
    )


torch.cuda.memory._record_memory_history(context=None, stacks="python", max_entries=10_000_000)
_collect, _reset = gc.collect, torch.cuda.reset_peak_memory_stats


def collect(*a, **k):
    mark("before-collect")
    r = _collect(*a, **k)
    mark("after-collect")
    return r


def reset(*a, **k):
    mark("phase-end")
    return _reset(*a, **k)


gc.collect, torch.cuda.reset_peak_memory_stats = collect, reset
try:
    runpy.run_path(SCRIPT, run_name="__main__")
finally:
    gc.collect, torch.cuda.reset_peak_memory_stats = _collect, _reset
mark("end")
