"""CPython's cyclic collector counting the program's allocations, not the twin's.

CPython runs a collection of generation 0 when its count, the GC-tracked objects allocated less
those deallocated since the last collection, passes the threshold (700) at an allocation
(Modules/gcmodule.c, `_PyObject_GC_Link`: 3.11 collects there, 3.12 at the next eval-breaker
check); every 10 of those run one of generation 1, and generation 2 runs when also
`long_lived_pending > long_lived_total / 4` (`gc_collect_generations`). A reference cycle holding
CUDA tensors is freed at the first collection of the generation it has reached, so the program's
memory depends on where these collections fall.

On the GPU an op's kernels allocate no Python object: the op returns its outputs' Tensor objects,
nothing else. The twin runs Python for every op (its dispatch mode: meta kernels, rules,
bookkeeping), whose transient objects would advance the count -- net, since the freelists of
dicts, lists and tuples take objects back without counting their deallocation (`dict_dealloc`,
`list_dealloc`, `tuple_dealloc`). A steady loop of `x * 2` adds 1.3 to the count per op under the
twin, 0 on the host, so collections came several times as often and the program's cycles reached
generation 2 before they died (blind272/jm01).

So the twin's own work is a window: the count read on entering it is written back on leaving it,
plus one for each Tensor object it returns that the op's caller did not pass in (what the GPU's op
allocates), and the collector is off inside it (a collection there would run inside the op, before
its outputs exist). Program code the window calls back (the program's `make_fx`, a FakeTensorMode
below) counts as it does on the GPU: the count is written back before it runs and read again after.
`gcstate->generations[0].count` has no Python setter: it is found in the interpreter's state
(`PyInterpreterState_Get()`) by the thresholds `gc.set_threshold` wrote there, and its place checked
against `gc.garbage` and `gc.callbacks`, whose addresses `_gc_runtime_state` holds after it (the
same layout in 3.8-3.12); where it is not found nothing is counted otherwise.
"""

from __future__ import annotations

import ctypes
import gc
import struct
import threading

import torch

#: `gcstate->generations[0].count` (None: not found, nothing is done)
COUNT: ctypes.c_int | None = None
#: `gcstate->long_lived_total`
LONG_LIVED_TOTAL: ctypes.c_ssize_t | None = None
#: the thread whose ops are windows (the program's main thread)
MAIN = threading.main_thread().ident

_GEN = 24  # sizeof(struct gc_generation): PyGC_Head (two pointers), threshold, count
_P = ctypes.sizeof(ctypes.c_void_p)


def _locate() -> None:
    global COUNT, LONG_LIVED_TOTAL
    if _P != 8:
        return
    try:
        get = ctypes.pythonapi.PyInterpreterState_Get
    except AttributeError:
        return
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
        if (
            at % 4 == 0
            and buf[at + _GEN : at + _GEN + 4] == struct.pack("i", marks[1])
            and buf[at + 2 * _GEN : at + 2 * _GEN + 4] == struct.pack("i", marks[2])
        ):
            gen0 = interp + at - 2 * _P  # the generation's PyGC_Head first
            # after the generations: generation0 (a pointer), the permanent generation, three
            # generations' stats (three Py_ssize_t each), collecting (an int, padded), garbage,
            # callbacks, long_lived_total, long_lived_pending
            garbage = gen0 + 3 * _GEN + _P + _GEN + 9 * 8 + 8
            words = (ctypes.c_void_p * 4).from_address(garbage)
            if words[0] == id(gc.garbage) and words[1] == id(gc.callbacks):
                COUNT = ctypes.c_int.from_address(interp + at + 4)
                LONG_LIVED_TOTAL = ctypes.c_ssize_t.from_address(garbage + 2 * _P)
            return
        at = buf.find(first, at + 1)


_locate()

#: the twin's window open now, [its count, whether the collector was on] (None: the program runs)
OPEN: list = [None]


def close(window, adds: int) -> None:
    """Leave `window`: the count it holds plus `adds`, the collector on again where it was."""
    COUNT.value = window[0] + adds
    OPEN[0] = None
    if window[1]:
        gc.enable()


_TENSOR = torch.Tensor


def fresh(out, args) -> int:
    """How many Tensor objects `out` holds that are none of `args` (nor in a list or tuple there):
    the objects the op's result adds on the GPU."""
    if isinstance(out, _TENSOR):
        for a in args:
            if a is out:
                return 0
            if type(a) in (list, tuple) and any(x is out for x in a):
                return 0
        return 1
    if type(out) in (tuple, list):
        return sum(fresh(o, args) for o in out)
    return 0
