"""Session 70 (helper li): the live blocks of a blind script at each phase boundary, by size and by the
script's line that allocated them, to find the blocks the twin and the GPU hold differently
(blind320/li01: the H100 holds 524,288 bytes more from phase 1 on; li03: 1,966,080 fewer in phase 1,
1,179,648 fewer after).

    python3 probes/li70_live_blocks_probe.py blind320/li01_....py     (from validation/run)

Runs the script unmodified (`runpy`) with the memory history on (python stacks); each
`torch.cuda.reset_peak_memory_stats()` the script calls first prints `live PHASE: N blocks, B bytes`
then one line per (size, line) group of active blocks: `  SIZE xCOUNT at FILE:LINE` (the innermost
frame in the script; `?` where none), sorted. Plain python3, one GPU, the script's own time and memory.
"""

import collections
import os
import runpy
import sys

import torch

script = os.path.abspath(sys.argv[1])
name = os.path.basename(script)
phase = [0]
original = torch.cuda.reset_peak_memory_stats


def where(frames):
    for f in frames or ():
        if os.path.basename(f.get("filename", "")) == name:
            return f"{name[:4]}:{f['line']}"
    return "?"


def dump(*args, **kwargs):
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    groups = collections.Counter()
    total = 0
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                groups[(b["size"], where(b.get("frames")))] += 1
                total += b["size"]
    print(f"live phase{phase[0]}: {sum(groups.values())} blocks, {total} bytes", flush=True)
    for (size, at), n in sorted(groups.items()):
        print(f"  {size} x{n} at {at}", flush=True)
    phase[0] += 1
    return original(*args, **kwargs)


torch.cuda.reset_peak_memory_stats = dump
torch.cuda.memory._record_memory_history(max_entries=1000000, stacks="python")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
