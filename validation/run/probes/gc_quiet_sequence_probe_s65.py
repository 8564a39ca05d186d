"""CPython's collections in a script, recorded without GC-tracked allocations (session 65, helper gc).

    python3 gc_quiet_sequence_probe_s65.py SCRIPT [ARGS...]          (on the GPU)
    vramscope run --gpu h100 gc_quiet_sequence_probe_s65.py SCRIPT   (the twin's process, the same lines)

gc_sequence_probe_s63.py prints at every collection, print and torch.func call, and those prints
allocate: they move the collections they measure (blind272/jm01's answer differs under it). This
one records into `array` buffers (ints, no GC-tracked object) and prints after the script:
`start` (the collector's state when SCRIPT starts: counts, collections per generation,
`long_lived_total` and `long_lived_pending`, modules loaded), one `b` line per phase boundary
(`torch.cuda.reset_peak_memory_stats()`) with the same and the CUDA bytes allocated, and `c` lines:
each phase's collections per generation and those that freed CUDA memory (generation, bytes).
"""

import array
import ctypes
import gc
import runpy
import struct
import sys

import torch


def _locate():
    """gcstate's long_lived_total and long_lived_pending (`_gc_runtime_state`, 3.8-3.12), found by
    the thresholds `gc.set_threshold` writes there, checked against gc.garbage and gc.callbacks."""
    get = ctypes.pythonapi.PyInterpreterState_Get
    get.restype = ctypes.c_void_p
    interp = get()
    old = gc.get_threshold()
    marks = (700_001, 10_003, 10_007)
    gc.set_threshold(*marks)
    try:
        buf = ctypes.string_at(interp, 1 << 14)
    finally:
        gc.set_threshold(*old)
    at = buf.find(struct.pack("i", marks[0]))
    while at >= 0:
        if buf[at + 24 : at + 28] == struct.pack("i", marks[1]) and buf[at + 48 : at + 52] == struct.pack(
            "i", marks[2]
        ):
            garbage = interp + at - 16 + 3 * 24 + 8 + 24 + 9 * 8 + 8
            words = (ctypes.c_void_p * 4).from_address(garbage)
            if words[0] == id(gc.garbage) and words[1] == id(gc.callbacks):
                return (
                    ctypes.c_ssize_t.from_address(garbage + 16),
                    ctypes.c_ssize_t.from_address(garbage + 24),
                )
            return None
        at = buf.find(struct.pack("i", marks[0]), at + 1)
    return None


_LL = _locate()
_STATE = array.array(
    "q"
)  # per boundary: 3 counts, 3 collections, long_lived total, pending, modules, allocated
_COLL = array.array("q")  # per collection: phase, generation, freed bytes
_phase = [0]
_start_alloc = [0]


def _record(buf):
    c0, c1, c2 = gc.get_count()
    buf.append(c0)
    buf.append(c1)
    buf.append(c2)
    for s in gc.get_stats():
        buf.append(s["collections"])
    buf.append(_LL[0].value if _LL else -1)
    buf.append(_LL[1].value if _LL else -1)
    buf.append(len(sys.modules))
    buf.append(torch.cuda.memory_allocated() if torch.cuda.is_initialized() else 0)


def _cb(phase, info):
    now = torch.cuda.memory_allocated() if torch.cuda.is_initialized() else 0
    if phase == "start":
        _start_alloc[0] = now
        return
    _COLL.append(_phase[0])
    _COLL.append(info["generation"])
    _COLL.append(_start_alloc[0] - now)


_reset = torch.cuda.reset_peak_memory_stats


def reset_peak_memory_stats(*args, **kwargs):
    _record(_STATE)
    _phase[0] += 1
    return _reset(*args, **kwargs)


def _show(tag, s):
    print(
        f"{tag} count ({s[0]}, {s[1]}, {s[2]}) collections [{s[3]}, {s[4]}, {s[5]}] long_lived {s[6]} "
        f"pending {s[7]} modules {s[8]} allocated {s[9]}",
        flush=True,
    )


print(
    "gc thresholds",
    gc.get_threshold(),
    "python",
    sys.version.split()[0],
    "torch",
    torch.__version__,
    flush=True,
)
_START = array.array("q")
_record(_START)
torch.cuda.reset_peak_memory_stats = reset_peak_memory_stats
gc.callbacks.append(_cb)
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    gc.callbacks.remove(_cb)
    _END = array.array("q")
    _record(_END)
    _show("start", _START)
    for i in range(0, len(_STATE), 10):
        _show(f"b phase{i // 10}", _STATE[i : i + 10])
    _show("end", _END)
    per = {}
    for i in range(0, len(_COLL), 3):
        p, g, f = _COLL[i : i + 3]
        per.setdefault(p, [0, 0, 0, []])[g] += 1
        if f:
            per[p][3].append((g, f))
    for p in sorted(per):
        n0, n1, n2, freed = per[p]
        print(f"c p{p} g0 {n0} g1 {n1} g2 {n2} freed {freed}", flush=True)
