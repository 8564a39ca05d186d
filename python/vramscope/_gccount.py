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
import weakref

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


def opened() -> list | None:
    """A window opened here, the collector off in it; None where the twin's work is not counted
    so: no count found, a window open already (the program's call of a torch function holds one
    over the ops it makes), or a thread other than the program's main one."""
    cell = COUNT
    if cell is None or OPEN[0] is not None or threading.get_ident() != MAIN:
        return None
    # (the list is made after the count is read: not counted)
    window = OPEN[0] = [cell.value, gc.isenabled()]
    gc.disable()
    return window


def close(window, adds: int) -> None:
    """Leave `window`: the count it holds plus `adds`, the collector on again where it was."""
    COUNT.value = window[0] + adds
    OPEN[0] = None
    if window[1]:
        gc.enable()


_compiling = torch.compiler.is_dynamo_compiling


def counted(call):
    """A mode's call, `call(self, func, types, args, kwargs)`, whose Python is the twin's, as a
    window: the count afterwards is the one it found plus the op's fresh outputs (`fresh`), what
    the GPU's op allocates. While dynamo traces the call, nothing of the collector's (it would be
    traced into the graph). On an error the count is written back alone and the arguments leave
    this frame: the error comes from C++ on the GPU, which holds none of them in the traceback."""

    def window_call(self, func, types, args=(), kwargs=None):
        if _compiling():
            return call(self, func, types, args, kwargs)
        window = opened()
        if window is None:
            return call(self, func, types, args, kwargs)
        try:
            out = call(self, func, types, args, kwargs)
        except BaseException:
            close(window, 0)
            del args, kwargs
            raise
        close(window, fresh(out, args))
        return out

    return window_call


#: the code of a window's frame (`counted`'s call), which a walk of the mode's frames passes
WINDOW_CODE = counted(None).__code__


_TENSOR = torch.Tensor
_weakrefs = weakref.getweakrefcount


def fresh(out, args) -> int:
    """How many Tensor objects `out` holds that are none of `args` (nor in a list or tuple there):
    the objects the op's result adds on the GPU. What the twin alone keeps of such a tensor dies
    with it, counted down then, so it counts here too: a small tensor's values (`_vs_val`, a host
    tensor in its `__dict__`) and the weak references to it (a constant's viewers' `WeakSet`).
    A list of results (a `_foreach_` op's) is checked against the ids of what was passed, taken
    once: every argument lives through the call, so an id names one object."""
    if isinstance(out, _TENSOR):
        for a in args:
            if a is out:
                return 0
            if type(a) in (list, tuple) and any(x is out for x in a):
                return 0
        return _objects(out)
    if type(out) in (tuple, list):
        return _fresh_in(out, _passed(args))
    return 0


def _passed(args) -> set:
    """The ids of `args` and of the items of its lists and tuples."""
    ids = set()
    for a in args:
        ids.add(id(a))
        if type(a) in (list, tuple):
            ids.update(map(id, a))
    return ids


def _fresh_in(out, passed: set) -> int:
    n = 0
    for o in out:
        if isinstance(o, _TENSOR):
            if id(o) not in passed:
                n += _objects(o)
        elif type(o) in (tuple, list):
            n += _fresh_in(o, passed)
    return n


def _objects(t) -> int:
    """The Tensor object `t` and what the twin keeps of it alone (see `fresh`)."""
    n = 1 + _weakrefs(t)
    kept = getattr(t, "__dict__", None)
    if kept:
        n += sum(1 for v in kept.values() if isinstance(v, _TENSOR))
    return n


# ---- the program's frames, read without making their frame objects ---------------------------
#
# Reading a frame's `f_back` makes a frame object for each frame it passes (3.11+: frames live on
# the interpreter's own stack, `_PyFrame_GetFrameObject`), a GC-tracked object that dies, counted
# down, when that frame returns: the twin's walk to the program's line at each allocation made
# one for every frame of the program's and torch's between it and the op, each counted down
# later in the program, where the GPU's process made none. So the walk reads the interpreter's
# frames (`_PyInterpreterFrame`) themselves: their code and last instruction.

#: every address of this process, readable as bytes (no memory is touched until read)
_MEMORY = None
#: (code's word, previous's word, last instruction's word, owner's byte offset) of
#: `_PyInterpreterFrame` in this version (3.11 and 3.12); None: frames are walked as objects
_LAYOUT = None
try:
    import sys as _sys

    if _sys.version_info[:2] == (3, 11):
        _LAYOUT = (4, 6, 7, 69)  # f_func, f_globals, f_builtins, f_locals, f_code, frame_obj, previous
    elif _sys.version_info[:2] == (3, 12):
        _LAYOUT = (0, 1, 7, 70)  # f_code, previous, f_funcobj, ..., frame_obj, prev_instr
    # a debug build's object header (Py_TRACE_REFS) moves every offset: walk frames as objects there
    if _LAYOUT is not None and _P == 8 and not hasattr(_sys, "gettotalrefcount"):
        _MEMORY = memoryview((ctypes.c_char * (1 << 48)).from_address(0)).cast("B")
    else:
        _LAYOUT = None
except Exception:  # pragma: no cover  (an interpreter without these layouts)
    _LAYOUT = _MEMORY = None

_WORD = struct.Struct("Q")
#: a `_PyInterpreterFrame`'s (code, previous) words, read by one unpack (`first_from`); the code's
#: word comes first in both layouts
_CODE_PREVIOUS = (
    struct.Struct(f"{8 * _LAYOUT[0]}xQ{8 * (_LAYOUT[1] - _LAYOUT[0] - 1)}xQ") if _LAYOUT is not None else None
)
_CODE_TYPE = type(_locate.__code__)
#: where a code object's instructions start (`_PyCode_CODE`: its `co_code_adaptive`, the type's
#: basic size)
_CODE_START = _CODE_TYPE.__basicsize__
#: each code object's `CodeEntry` by address, while the code lives
_CODES: dict = {}


class CodeEntry(weakref.ref):
    """A code object's entry in `_CODES` (call it for the code), with the caller's verdict on it
    and its lines' texts by instruction offset. It does not keep the code alive and leaves `_CODES`
    when the code dies, so no later code at that address reads its verdict or lines. Keeping the
    code kept dynamo's transformed code past `torch._dynamo.reset()`, whose death removes the
    global holding the compiled function (`CleanupManager`, torch/_dynamo/utils.py): on the H100 a
    compiled function dropped so frees its graph's CUDA constants, the twin kept them to the end
    (probes/me66_compiled_tensor_constants_kinds.py's `dropped` lines)."""

    __slots__ = ("address", "lines", "verdict")

    def __new__(cls, code, address: int):
        return super().__new__(cls, code, _forget)

    def __init__(self, code, address: int):
        super().__init__(code, _forget)
        self.address = address
        self.verdict = None
        self.lines: dict | None = None


def _forget(entry: CodeEntry) -> None:
    if _CODES.get(entry.address) is entry:
        del _CODES[entry.address]


def code_entry(code, address: int | None = None) -> CodeEntry:
    """`code`'s entry (`CodeEntry`), made on first sight."""
    address = id(code) if address is None else address
    known = _CODES.get(address)
    if known is None:
        known = _CODES[address] = CodeEntry(code, address)
    return known


def frames_from(frame):
    """(code, last instruction's byte offset) of each frame below `frame` (a frame object: the
    caller's own), innermost first, without making frame objects; None where this interpreter's
    frames cannot be read so (the caller walks `f_back`)."""
    if _LAYOUT is None:
        return None
    code_w, prev_w, instr_w, owner_at = _LAYOUT
    mem = _MEMORY
    unpack = _WORD.unpack_from
    # PyFrameObject: PyObject_HEAD (two words), f_back, f_frame
    p = unpack(mem, id(frame) + 24)[0]
    out = []
    while p:
        p = unpack(mem, p + 8 * prev_w)[0]
        if not p:
            break
        if mem[p + owner_at] == 3:
            continue  # 3.12's C-stack shim frame (FRAME_OWNED_BY_CSTACK), skipped as by f_back
        c = unpack(mem, p + 8 * code_w)[0]
        known = _CODES.get(c)
        if known is None:
            known = code_entry(ctypes.cast(c, ctypes.py_object).value, c)
        lasti = unpack(mem, p + 8 * instr_w)[0] - c - _CODE_START
        out.append((known, lasti))
    return out


def first_from(frame, judge):
    """(`CodeEntry`, last instruction's byte offset) of the innermost frame below `frame` whose
    code `judge(code)` accepts, None where none does; read as `frames_from` reads them, stopping
    there, the offset read for that frame alone. The verdict is kept in the code's entry, asked
    once (one judge in a process: the twin's `_source_line`'s). False where this interpreter's
    frames cannot be read so."""
    if _LAYOUT is None:
        return False
    owner_at = _LAYOUT[3]
    mem = _MEMORY
    unpack = _WORD.unpack_from
    pair = _CODE_PREVIOUS.unpack_from
    codes = _CODES
    p = unpack(mem, id(frame) + 24)[0]
    if p:
        p = pair(mem, p)[1]
    while p:
        # the frame's code and the previous frame, read in one call
        c, previous = pair(mem, p)
        if mem[p + owner_at] == 3:
            p = previous
            continue  # 3.12's C-stack shim frame (FRAME_OWNED_BY_CSTACK), skipped as by f_back
        known = codes.get(c)
        if known is None:
            known = code_entry(ctypes.cast(c, ctypes.py_object).value, c)
        verdict = known.verdict
        if verdict is None:
            verdict = known.verdict = judge(known())
        if verdict:
            return known, unpack(mem, p + 8 * _LAYOUT[2])[0] - c - _CODE_START
        p = previous
    return None


def line_of(code, lasti: int) -> int:
    """The line of `code`'s instruction at byte offset `lasti` (`PyCode_Addr2Line`, as a frame's
    `f_lineno` without a trace function)."""
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line if line is not None else -1
    return code.co_firstlineno


def _walks_agree() -> bool:
    """Whether the in-place walk reads this interpreter's frames as `f_back` does: checked once, on
    a stack of this module's own calls, before any program frame is read so."""

    def innermost():
        here = _sys._getframe()
        read = frames_from(here)
        walked = []
        f = here.f_back
        while f is not None:
            walked.append((f.f_code, f.f_lineno))
            f = f.f_back
        return read is not None and [(k(), line_of(k(), i)) for k, i in read] == walked

    def middle():
        return innermost()

    return middle()


if _LAYOUT is not None:
    try:
        _agree = _walks_agree()
    except Exception:  # pragma: no cover  (a layout this module misreads)
        _agree = False
    if not _agree:  # pragma: no cover
        _LAYOUT = _MEMORY = None
