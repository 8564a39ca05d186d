"""Session 79 probe (helper nc): which 2 MiB holes blind303/kr04's H100 process still has at a few
points of phases 1 and 2, i.e. where the driver would put the next 2 MiB `cudaMalloc`.

    OUT=DIR python3 probes/nc79_kr04_free_2mib_probe.py        (from validation/run; < 90 s, < 4 GB)

Why: in kr04's H100 maps and history (mw78_kr04_assert_buffer_probe_h100.out) the 8.25 MiB
device-side-assert buffer (rule 19) lies at the first embedding where the twin puts it (offset 0
below), and the pool's top 8 MiB (rule 14) is -152..-144: the driver's 2 MiB page-locked buffer at
-152, the first 2 MiB segment after the release at -148. Yet no segment of the whole run ever goes
to -146 (the pool top's last 2 MiB), -150, +10..+16 (what the buffer leaves of its chunk's hole) or
-50..-48 (a 94 MiB segment's chunk), where rule 2 would put phase 2's 2 MiB segments (the twin does,
and ends 4 MiB under in reserved from phase 2). Something the maps and the history do not show
fills them; this says when.

At each probe point it takes 2 MiB with the driver's `cuMemAlloc` eight times (held, so each goes
to the next hole), prints their offsets in MiB from the 8.25 MiB buffer, then frees them (a hole
in a chunk comes back as it was). Points: after the first `embedding` (the buffer's op), the first
`bmm` (the first cuBLAS handle), the first cuDNN attention, the first `empty_cache` and the first
`reset_peak_memory_stats` after it (phase 2's start), and after each of the ops that make phase 2's
first four segments (the fourth, a 2 MiB one, went to -56 on the H100, to -146 in the twin with the
pool's top laid out).
Then the first 60 segment events with offsets, to check against the probe-free run's.
"""

import ctypes
import os
import pathlib
import runpy
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

here = pathlib.Path(__file__).resolve().parent.parent
script = next((here / "blind303").glob("kr04_*.py"))
MIB = 1 << 20
cuda = ctypes.CDLL("libcuda.so.1") if torch.cuda.is_available() else None
state = {"buf": None, "done": set(), "phase2": False, "segs": 0, "new": 0}


def zero_mappings():
    out = []
    for line in open("/proc/self/maps"):
        f = line.split()
        if len(f) > 5 and "zero" in f[5]:
            a, b = (int(x, 16) for x in f[0].split("-"))
            out.append((a, b))
    return out


def probe(tag):
    if state["buf"] is None:
        return
    got = []
    for _ in range(6):
        p = ctypes.c_uint64()
        rc = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(2 * MIB))
        if rc != 0:
            got.append(f"rc{rc}")
            break
        got.append(p.value)
    offs = " ".join(f"{(g - state['buf']) / MIB:+.0f}" if isinstance(g, int) else g for g in got)
    for g in reversed(got):
        if isinstance(g, int):
            cuda.cuMemFree_v2(ctypes.c_uint64(g))
    zeros = " ".join(f"{(a - state['buf']) / MIB:+.2f}:{(b - a) / MIB:.2f}" for a, b in zero_mappings())
    print(f"{tag}: 2 MiB would go to {offs}; /dev/zero mappings {zeros}", flush=True)


class Points(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__
        if name.startswith("embedding") and state["buf"] is None:
            big = [a for a, b in zero_mappings() if abs((b - a) - 8_650_752) < MIB]
            if big:
                state["buf"] = big[0]
                probe("after the first embedding")
        for key in ("bmm", "_scaled_dot_product_cudnn_attention"):
            if name.startswith(key) and key not in state["done"]:
                state["done"].add(key)
                probe(f"after the first {key}")
        if state["phase2"] and state["new"] < 4:
            segs = torch.cuda.memory_stats().get("segment.all.current", 0)
            if segs > state["segs"]:
                state["segs"] = segs
                state["new"] += 1
                probe(f"after phase 2's new segment {state['new']} ({name})")
        return out


_empty = torch.cuda.empty_cache
_reset = torch.cuda.reset_peak_memory_stats


def empty_cache():
    _empty()
    if "empty" not in state["done"]:
        state["done"].add("empty")
        probe("after the first empty_cache")


def reset_peak_memory_stats(*a, **k):
    _reset(*a, **k)
    if "empty" in state["done"] and not state["phase2"]:
        state["phase2"] = True
        state["segs"] = torch.cuda.memory_stats().get("segment.all.current", 0)
        probe("at phase 2's start")


torch.cuda.empty_cache = empty_cache
torch.cuda.reset_peak_memory_stats = reset_peak_memory_stats
if torch.cuda.is_available():
    torch.cuda.memory._record_memory_history(max_entries=200000)
sys.argv = [str(script)]
sys.path[0] = str(script.parent)
os.environ.setdefault("PYTHONUNBUFFERED", "1")
with Points():
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit:
        pass
snap = torch.cuda.memory._snapshot() if torch.cuda.is_available() else {"device_traces": [[]]}
n = 0
for i, e in enumerate(snap["device_traces"][0]):
    if e["action"].startswith("segment") and state["buf"] is not None:
        print(f"  {i} {e['action']} {(e['addr'] - state['buf']) / MIB:+.2f} {e['size'] / MIB:.2f}")
        n += 1
        if n >= 60:
            break
