"""Run a PyTorch script on a GPU and record every aten op that allocates more than the storages it returns.

    python ops_truth.py SCRIPT [ARGS...]        (lines go to $OUT_JSONL, default stdout)

SCRIPT runs in-process as `__main__` under a TorchDispatchMode, so each op is seen as `vramscope run` sees
it (after autograd and the composite decompositions). Around every op the mode reads the caching
allocator's cumulative counters (`allocation.all.allocated`, `requested_bytes.all.allocated`,
`allocated_bytes.all.allocated`): the allocations the op made, freed or not. It subtracts the CUDA
storages the op returned that none of its inputs held, and writes one line for each op whose counters
say more (or less) than those storages:

    {"op", "args": [...], "new": [bytes of each new output storage], "count", "requested", "rounded"}

`args` describes tensors as [sizes, strides, dtype, storage_offset] and everything else by value, which
is what the twin's tables key on. For `aten.convolution_backward` with more than one output the mode
also calls it once per output (`"op": "convolution_backward[0]"`, `[1]`, `[2]`) so the input gradient's
and the weight gradient's cuDNN workspaces come apart. The last line counts every op seen by name.

With OPS_TRUTH_ALL=1 every op gets its line. Run under `vramscope run` the same lines come from the twin,
for `validation/run/ops_diff.py` to compare. The mode changes no allocation of the script's own; only
those extra backward calls add their own.
"""

import collections
import json
import os
import runpy
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_out = open(os.environ["OUT_JSONL"], "a", buffering=1) if os.environ.get("OUT_JSONL") else sys.stdout


def _counters():
    if not torch.cuda.is_initialized():
        return (0, 0, 0)
    s = torch._C._cuda_memoryStats(0)
    return (
        s["allocation"]["all"]["allocated"],
        s["requested_bytes"]["all"]["allocated"],
        s["allocated_bytes"]["all"]["allocated"],
    )


def _describe(x):
    if isinstance(x, torch.nn.parameter.UninitializedTensorMixin):
        # a lazy module's parameter before its first call has no shape to read
        return "uninitialized"
    if isinstance(x, torch.Tensor) and x.layout == torch.jagged:
        # a jagged nested tensor (its ragged size is symbolic): the packed values and offsets
        return [str(list(x.shape)), "jagged", None, [_describe(p) for p in _parts(x)]]
    if isinstance(x, torch.Tensor) and x.layout != torch.strided:
        # a sparse tensor has no strides or storage of its own: its layout, number of specified
        # elements (COO) and the dense tensors that hold it
        nnz = x._nnz() if x.layout == torch.sparse_coo else None
        return [list(x.shape), str(x.layout).removeprefix("torch."), nnz, [_describe(p) for p in _parts(x)]]
    if isinstance(x, torch.Tensor):
        return [
            list(x.shape),
            list(x.stride()),
            str(x.dtype).removeprefix("torch."),
            x.storage_offset(),
            x.device.type,
        ]
    if isinstance(x, (torch.UntypedStorage, torch.TypedStorage)):
        # `set_(storage, ...)` of torch.load's `_rebuild_tensor`: a storage's repr reads every byte
        return ["storage", x.nbytes(), x.device.type]
    if isinstance(x, (list, tuple)):
        return [_describe(y) for y in x]
    if isinstance(x, (int, float, bool, str)) or x is None:
        return x
    return repr(x)


def _parts(t):
    """The strided tensors that hold `t`: itself, a sparse tensor's indices and values, or a jagged
    nested tensor's values and offsets."""
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices(), t.values()]
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return [t.ccol_indices(), t.row_indices(), t.values()]
    if t.layout == torch.jagged:
        return [t._values, t._offsets]
    return [t]


def _dense(xs):
    return [p for t in xs if isinstance(t, torch.Tensor) and t.is_cuda for p in _parts(t)]


def _cuda_storages(xs):
    # the StorageImpl's address: unique on a GPU and under `vramscope run` alike (where data_ptr is 0)
    return {t.untyped_storage()._cdata for t in _dense(xs)}


def _new_storages(inputs, outputs):
    held = _cuda_storages(inputs)
    seen, new = set(), []
    for t in _dense(outputs):
        s = t.untyped_storage()
        p = s._cdata
        if p not in held and p not in seen and s.nbytes() > 0:
            seen.add(p)
            new.append(s.nbytes())
    return new


class OpsTruth(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = collections.Counter()

    def _measure(self, name, func, args, kwargs):
        before = _counters()
        out = func(*args, **kwargs)
        after = _counters()
        flat_in, _ = tree_flatten((args, kwargs))
        flat_out, _ = tree_flatten(out)
        new = _new_storages(flat_in, flat_out)
        d = [a - b for a, b in zip(after, before, strict=True)]
        if d[0] != len(new) or d[1] != sum(new) or os.environ.get("OPS_TRUTH_ALL"):
            rec = {
                "op": name,
                "args": _describe(list(args)),
                "kwargs": _describe(kwargs),
                "new": new,
                "count": d[0],
                "requested": d[1],
                "rounded": d[2],
            }
            _out.write(json.dumps(rec) + "\n")
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func.overloadpacket.__name__)
        self.seen[name] += 1
        out = self._measure(name, func, args, kwargs)
        if func is torch.ops.aten.convolution_backward.default and sum(args[-1]) > 1:
            for i, on in enumerate(args[-1]):
                if on:
                    mask = [j == i for j in range(3)]
                    res = self._measure(f"{name}[{i}]", func, (*args[:-1], mask), kwargs)
                    del res
        return out


def _causal_bias_outside_modes():
    """`torch.nn.attention.bias.CausalBias(...)` is `Tensor.__new__`'s legacy constructor made into the
    subclass, which any active dispatch mode breaks ("the raw Tensor object is already associated to a
    python object"): made with the modes off, as a plain run makes it (a host tensor, no CUDA op)."""
    from torch.nn.attention.bias import CausalBias
    from torch.utils._python_dispatch import _disable_current_modes

    def new(cls, *args, **kwargs):
        with _disable_current_modes():
            return torch.Tensor.__new__(cls, *args, **kwargs)

    CausalBias.__new__ = new


def main():
    _causal_bias_outside_modes()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    mode = OpsTruth()
    exc = None
    try:
        with mode:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        exc = None if e.code in (0, None) else f"SystemExit({e.code})"
    except BaseException as e:
        exc = f"{type(e).__name__}: {str(e)[:300]}"
    _out.write(json.dumps({"seen": dict(mode.seen), "exception": exc}) + "\n")


if __name__ == "__main__":
    main()
