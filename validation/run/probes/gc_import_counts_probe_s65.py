"""The collector's state through `import torch` and a lazy import, in a plain process (session 65, helper gc).

    python3 gc_import_counts_probe_s65.py                     (on the GPU: CPython 3.12.3)
    vramscope run --gpu h100 gc_import_counts_probe_s65.py    (the twin: its `_gcimports` rule)

Lines: `start` (before `import torch`), `torch` (after it), `sympy` (after `import sympy`, which
`import torch` does not load and make_fx's first call does), `collected` (after a full
`gc.collect()`): each with `gc.get_count()`, the collections per generation, and gcstate's
`long_lived_total` and `long_lived_pending` (found as `_gccount` finds them; -1 where not found).
The twin's `_gcimports` counts torch's import and sympy's as a plain process's collector would;
the GPU's lines say how far CPython 3.12.3's object counts (the GPU's) are from the twin's 3.11.
"""

import ctypes
import gc
import struct
import sys


def _locate():
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
    first = struct.pack("i", marks[0])
    at = buf.find(first)
    while at >= 0:
        if buf[at + 24 : at + 28] == struct.pack("i", marks[1]) and buf[at + 48 : at + 52] == struct.pack(
            "i", marks[2]
        ):
            garbage = interp + at - 16 + 3 * 24 + 8 + 24 + 9 * 8 + 8
            words = (ctypes.c_void_p * 2).from_address(garbage)
            if words[0] == id(gc.garbage) and words[1] == id(gc.callbacks):
                return ctypes.c_ssize_t.from_address(garbage + 16), ctypes.c_ssize_t.from_address(
                    garbage + 24
                )
            return None
        at = buf.find(first, at + 1)
    return None


_LL = _locate()


def show(tag):
    total, pending = (_LL[0].value, _LL[1].value) if _LL else (-1, -1)
    stats = [s["collections"] for s in gc.get_stats()]
    print(
        f"{tag} count {gc.get_count()} collections {stats} long_lived {total} pending {pending} "
        f"modules {len(sys.modules)}",
        flush=True,
    )


print("python", sys.version.split()[0], flush=True)
show("start")
import torch  # noqa: E402

show("torch")
import sympy  # noqa: E402, F401

show("sympy")
gc.collect()
show("collected")
print("torch", torch.__version__, flush=True)
