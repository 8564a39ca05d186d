"""Session 70 (helper li): the live blocks of a blind script at each phase boundary, by size and by the
script's line that allocated them, to find the blocks the twin and the GPU hold differently
(blind320/li01: the H100 holds 524,288 bytes more from phase 1 on; li03: 1,966,080 fewer in phase 1,
1,179,648 fewer after).

    python3 probes/li70_live_blocks_probe.py blind320/li01_....py     (from validation/run)

Runs the script unmodified (`runpy`) with the memory history on (python stacks); each
`torch.cuda.reset_peak_memory_stats()` the script calls first prints `peak PHASE (trace): N blocks,
B bytes`, the blocks live at the phase's largest total as the trace replays it (alloc adds,
free_completed takes away), then `live PHASE: N blocks, B bytes`, the snapshot's active blocks at the
boundary; each followed by one line per (size, line) group: `  SIZE xCOUNT at FILE:LINE` (the
innermost frame in the script; `?` where none), sorted. Plain python3, one GPU, the script's own
time and memory.
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


LIVE = {}  # address -> (size, line) of the blocks the trace has allocated and not yet freed
SEEN = [0]  # trace entries consumed


def groups_of(blocks):
    return sorted(collections.Counter(blocks).items())


def peak_of_phase(trace):
    """The trace's live blocks at the largest total since the last boundary (`alloc` adds,
    `free_completed` takes away), and that total."""
    start = dict(LIVE)
    total = best = sum(size for size, _ in LIVE.values())
    best_i = -1
    new = trace[SEEN[0] :]
    for i, e in enumerate(new):
        if e["action"] == "alloc":
            LIVE[e["addr"]] = (e["size"], where(e.get("frames")))
            total += e["size"]
        elif e["action"] == "free_completed" and e["addr"] in LIVE:
            total -= LIVE.pop(e["addr"])[0]
        if total > best:
            best, best_i = total, i
    SEEN[0] = len(trace)
    at = start
    for e in new[: best_i + 1]:
        if e["action"] == "alloc":
            at[e["addr"]] = (e["size"], where(e.get("frames")))
        elif e["action"] == "free_completed":
            at.pop(e["addr"], None)
    return best, list(at.values())


def dump(*args, **kwargs):
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    trace = snap["device_traces"][0]
    if len(trace) >= ENTRIES:
        print("trace full: peaks unreliable", flush=True)
    best, blocks = peak_of_phase(trace)
    print(f"peak phase{phase[0]} (trace): {len(blocks)} blocks, {best} bytes", flush=True)
    for (size, at), n in groups_of(blocks):
        print(f"  {size} x{n} at {at}", flush=True)
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
ENTRIES = 3000000
torch.cuda.memory._record_memory_history(max_entries=ENTRIES, stacks="python")
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
