"""Values through a CUDA graph's replay.

A CUDA graph replays the kernels its capture recorded on whatever its memory holds then
(`cudaGraphLaunch`): the values it writes are those the same kernels compute from the replay's
inputs. The twin runs a captured region once, eagerly, and a replay launches nothing
(`_cuda.CUDAGraph.replay`), so the values the twin carries through the capture (docs/run.md
"Values") went no further: after a replay the graph's outputs and the buffers it writes in place
read as zeros, or as the capture's values. transformers' static-cache `generate()` compiles its
decoding step with CUDA graphs (mode "reduce-overhead") and reads such values between graphs: MVP's
and BART's decoders take `torch.arange(past_length, past_length + n)` eagerly from the cache's
`cumulative_length`, which a replayed graph advances in place, and the graph before the break adds
`n` to it (blind287/kb02: on the third step the end read 0, below the start, and `arange` raised).

So a capture records, in order, what writes the values the twin computes: each Inductor kernel whose
values it ran on the host (`_compile._launch_values`) and each eager op whose values it computed
(`Capture.run`), with every tensor argument as an address range of the device's memory (its
storage's data pointer, offset, sizes, strides, dtype); a launch or op whose values it did not
compute writes unknown values there. A replay runs that tape again on the host over a shadow of the
memory it touches, from the values the tensors at those addresses carry at the replay (the graph's
inputs, which the tree manager copied into its static buffers), and the tensors over the memory it
wrote take the values written (unknown where the tape wrote unknown values). Replays of graphs whose
kernels' values the twin does not compute (large or floating results) are unchanged.
"""

from __future__ import annotations

import weakref

import torch

from . import _tensor

_NO_TF = torch._C.DisableTorchFunction
_NO_DISPATCH = torch._C._DisableTorchDispatch


class _Arg:
    """A tensor argument as the memory it names: its storage's address and size, and its view."""

    __slots__ = ("addr", "dtype", "nbytes", "offset", "ref", "shape", "stride")

    def __init__(self, t):
        from ._cudagraph_trees import storage_ptr

        with _NO_TF():
            st = t.untyped_storage()
            self.addr = storage_ptr(st._cdata)
            self.nbytes = st.nbytes()
            self.offset = t.storage_offset()
            self.shape = tuple(t.shape)
            self.stride = tuple(t.stride())
            self.dtype = t.dtype
        # the captured tensor itself, while it lives (a static input, a manual capture's output)
        self.ref = weakref.ref(t)

    def covers(self) -> bool:
        """Whether this argument's view is every byte of its storage."""
        numel = 1
        for n in self.shape:
            numel *= n
        dense = self.stride == _tensor.contiguous_strides(self.shape)
        return self.offset == 0 and dense and numel * self.dtype.itemsize == self.nbytes

    def fits(self, memory) -> bool:
        """Whether this argument's view lies within `memory` (another storage may have held the
        address before, of another size: the caching allocator hands a block out again)."""
        if any(n == 0 for n in self.shape):
            return True
        last = self.offset + sum((n - 1) * st for n, st in zip(self.shape, self.stride, strict=True))
        return (
            last + 1
        ) * self.dtype.itemsize <= memory.numel() and memory.numel() % self.dtype.itemsize == 0

    def view(self, memory):
        """This argument's view of `memory`, its storage's bytes on the host."""
        return memory.view(self.dtype).as_strided(self.shape, self.stride, self.offset)


def _arg(a):
    """A tensor argument as an `_Arg`, within lists too (a foreach op's): the tape holds no tensor
    (a captured intermediate dies when the capture's run drops it, as on the GPU)."""
    if isinstance(a, torch.Tensor):
        return _Arg(a) if _tensor.registered(a) else a
    if isinstance(a, (list, tuple)):
        return type(a)(_arg(x) for x in a)
    return a


def _args(values):
    return [_arg(a) for a in values]


def tape(cap):
    """The tape of the graph capturing on the current stream, or None."""
    tapes = getattr(cap, "graph_tapes", None)
    return tapes.get(cap.stream) if tapes else None


def undo_log(cap):
    """The values the capture on the current stream overwrote, or None."""
    logs = getattr(cap, "graph_undo", None)
    return logs.get(cap.stream) if logs else None


def note_overwritten(cap, tensors) -> None:
    """`tensors` about to take values the capture computed: what they carry now is what the
    memory still holds after the capture (a capture launches nothing), kept to be put back."""
    log = undo_log(cap)
    if log is None:
        return
    for t in tensors:
        if isinstance(t, torch.Tensor) and _tensor.registered(t):
            v = _tensor.value(t)
            log.append((weakref.ref(t), None if v is None else v.clone()))


def undo(log, existing) -> None:
    """At the capture's end: the tensors over storages that existed before it (`existing`, their
    keys) carry again what they carried before it (the later values were the capture's run's,
    which the GPU does not make: its first replay does)."""
    with _NO_TF():
        for ref, old in reversed(log):
            t = ref()
            if t is None or t.untyped_storage()._cdata not in existing:
                continue
            _put(t, old)


def _put(t, v) -> None:
    """`t` carries `v` (None: no values), written into the values it holds where their layout
    agrees, which its base and other views share."""
    held = _tensor.value(t)
    if v is not None and held is not None and held.shape == v.shape and held.dtype == v.dtype:
        held.copy_(v)
    else:
        _tensor.set_value(t, v)


def record_launch(cap, autotuner, args, names, writes, computed) -> None:
    """An Inductor kernel launched while a graph captures: replayed on the host where the capture
    computed its values (`computed`), else its written arguments hold unknown values."""
    t = tape(cap)
    if t is None:
        return
    note_overwritten(cap, [a for n, a in zip(names, args, strict=False) if n in writes])
    if computed is None:
        t.append(("unknown", [_Arg(a) for n, a in zip(names, args, strict=False) if n in writes]))
    else:
        t.append(("launch", autotuner, _args(args), names, writes))


def record_op(cap, func, args, kwargs, outs, written, computed: bool) -> None:
    """An eager op run while a graph captures: replayed on the host where the capture computed
    its values (`computed`), else the tensors it makes and writes hold unknown values."""
    t = tape(cap)
    if t is None:
        return
    made = [o for o in outs if isinstance(o, torch.Tensor) and _tensor.registered(o)]
    if not computed:
        t.append(("unknown", [_Arg(a) for a in [*made, *written] if _tensor.registered(a)]))
        return
    kw = {k: _arg(v) for k, v in kwargs.items()}
    t.append(("op", func, _args(args), kw, [_Arg(o) for o in made]))


class _Shadow:
    """The device memory a replay touches, by storage address: its bytes on the host, or None where
    they are unknown. Memory not written yet reads from the tensors there that carry values."""

    def __init__(self, sources):
        self.memory: dict = {}
        self.sources: dict = {}
        for s in sources:
            if isinstance(s, torch.Tensor) and _tensor.registered(s) and _tensor.value(s) is not None:
                arg = _Arg(s)
                self.sources.setdefault(arg.addr, []).append((arg, s))

    def read(self, arg):
        """`arg`'s values on the host, or None."""
        if arg.addr not in self.memory:
            self.memory[arg.addr] = self._load(arg)
        memory = self.memory[arg.addr]
        return None if memory is None or not arg.fits(memory) else arg.view(memory)

    def _load(self, arg):
        candidates = list(self.sources.get(arg.addr, ()))
        captured = arg.ref()
        if captured is not None and _tensor.value(captured) is not None:
            candidates.append((arg, captured))
        for view, t in candidates:
            memory = torch.zeros(max(arg.nbytes, view.nbytes), dtype=torch.uint8)
            if view.fits(memory):
                view.view(memory).copy_(_tensor.value(t))
                return memory
        return None

    def write(self, arg, values) -> None:
        """`values` written through `arg` (None: unknown values)."""
        if values is None:
            self.memory[arg.addr] = None
            return
        memory = self.memory.get(arg.addr, False)
        if memory is False:
            memory = self._load(arg)
        if memory is not None and not arg.fits(memory):
            memory = None
        if memory is None:
            if not arg.covers():
                # a part written into memory of unknown values: the rest stays unknown
                self.memory[arg.addr] = None
                return
            memory = torch.zeros(arg.nbytes, dtype=torch.uint8)
        self.memory[arg.addr] = memory
        arg.view(memory).copy_(values)


def replay(tape_, sources=()):
    """Run a graph's tape over the memory the tensors `sources` (and the captured ones still alive)
    hold; the shadow memory it leaves."""
    from torch.utils._python_dispatch import _disable_current_modes

    shadow = _Shadow(sources)
    with _disable_current_modes(), _NO_TF(), _NO_DISPATCH():
        for entry in tape_:
            kind = entry[0]
            if kind == "unknown":
                for arg in entry[1]:
                    shadow.write(arg, None)
            else:
                try:
                    (_replay_launch if kind == "launch" else _replay_op)(shadow, *entry[1:])
                except Exception:  # what the host cannot replay writes unknown values
                    for arg in _writes_of(entry):
                        shadow.write(arg, None)
    return shadow


def _replay_launch(shadow, autotuner, args, names, writes) -> None:
    from ._compile import _interpret

    mutated = set(getattr(autotuner, "mutated_arg_names", None) or ())
    host = []
    for n, a in zip(names, args, strict=False):
        if not isinstance(a, _Arg):
            host.append(a)
            continue
        if n in writes and n not in mutated and not n.startswith("in_out_ptr"):
            # a fresh output: the kernel only writes it
            host.append(
                torch.zeros(a.nbytes, dtype=torch.uint8).view(a.dtype).as_strided(a.shape, a.stride, a.offset)
            )
            continue
        v = shadow.read(a)
        if v is None:
            host = None
            break
        host.append(v.clone())
    written = [(i, a) for i, (n, a) in enumerate(zip(names, args, strict=False)) if n in writes]
    if host is not None:
        bound = dict(zip(names, host, strict=False))
        host = _interpret(autotuner, host, bound)
    for i, a in written:
        shadow.write(a, None if host is None else host[i])


def _replay_op(shadow, func, args, kwargs, outs) -> None:
    def host(a):
        if isinstance(a, _Arg):
            v = shadow.read(a)
            if v is None:
                raise LookupError
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(host(x) for x in a)
        return a

    try:
        h_args = [host(a) for a in args]
        h_kwargs = {k: host(v) for k, v in kwargs.items()}
        if "device" in h_kwargs:
            h_kwargs["device"] = "cpu"
        result = func(*h_args, **h_kwargs)
    except Exception:  # unknown inputs, or an op the host cannot run: its results unknown
        for o in outs:
            shadow.write(o, None)
        return
    if isinstance(result, torch.Tensor):
        results = [result]
    elif isinstance(result, (list, tuple)):
        results = [r for r in result if isinstance(r, torch.Tensor)]
    else:  # an in-place foreach op returns nothing
        results = []
    # an in-place op wrote through its host views into the shadow already
    for o, r in zip(outs, results, strict=False):
        if r.shape == o.shape:
            shadow.write(o, r)
        else:
            shadow.write(o, None)


def apply(shadow, tensors) -> None:
    """Each tensor over memory the replay wrote takes the values there."""
    with _NO_TF(), _NO_DISPATCH():
        for t in tensors:
            if not (isinstance(t, torch.Tensor) and _tensor.registered(t)):
                continue
            arg = _Arg(t)
            if arg.addr not in shadow.memory:
                continue
            memory = shadow.memory[arg.addr]
            _put(t, None if memory is None or not arg.fits(memory) else arg.view(memory).clone())


def _flat(values):
    for a in values:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def _writes_of(entry) -> list:
    """The memory a tape entry writes: a launch's written arguments, an op's results and every
    tensor argument it was handed (it may write them)."""
    if entry[0] == "launch":
        _, _, args, names, writes = entry
        return [a for n, a in zip(names, args, strict=False) if n in writes and isinstance(a, _Arg)]
    _, _, args, kwargs, outs = entry
    return [a for a in _flat([*args, *kwargs.values(), *outs]) if isinstance(a, _Arg)]


def captured(tape_) -> list:
    """The captured tensors the tape names that are still alive."""
    out = []
    for entry in tape_:
        if entry[0] == "unknown":
            args = entry[1]
        elif entry[0] == "launch":
            args = entry[2]
        else:
            args = [*entry[2], *entry[3].values(), *entry[4]]
        for a in _flat(args):
            if isinstance(a, _Arg):
                t = a.ref()
                if t is not None:
                    out.append(t)
    return out
