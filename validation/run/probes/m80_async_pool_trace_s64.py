"""Session 64 probe (helper m80) for blind280/ju01: where CUDA's stream-ordered pool
(`backend:cudaMallocAsync`) puts a real workload's blocks, and when its reserved memory grows and
shrinks. The twin's pool layout (crates/alloc/src/malloc_async.rs: first fit in address order over
32 MiB granules) read ju01's reserved 5 granules high at the training peak, 10 low after the trim and
4 low at the end; this is the op-by-op truth to find the driver's placement rule from.

    python3 probes/m80_async_pool_trace_s64.py SCRIPT > OUT.jsonl     (from validation/run)

Sets the backend before torch is imported, runs SCRIPT as `__main__` under a TorchDispatchMode and
writes, for every op, one line [index, op, allocated, reserved, [[data_ptr, storage nbytes], ...]]
(the new CUDA outputs' storages; allocated and reserved read after the op); an `empty_cache` call
gets a line ["empty_cache", allocated, reserved] after it. The twin writes the same lines (its
pointers are its own: compare offsets from the first block, and the reserved column). ju01: ~20 s."""

import json
import os
import runpy
import sys

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_out = sys.stdout
_n = [0]


class Trace(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ins = {
            t.untyped_storage().data_ptr()
            for t in tree_flatten((args, kwargs))[0]
            if isinstance(t, torch.Tensor) and t.is_cuda
        }
        out = func(*args, **kwargs)
        new = []
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                s = t.untyped_storage()
                if s.data_ptr() not in ins and s.nbytes():
                    new.append([s.data_ptr(), s.nbytes()])
        _n[0] += 1
        line = [_n[0], func.__name__, torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), new]
        _out.write(json.dumps(line) + "\n")
        return out


_empty = torch.cuda.empty_cache


def _empty_cache():
    _empty()
    _out.write(
        json.dumps(["empty_cache", torch.cuda.memory_allocated(), torch.cuda.memory_reserved()]) + "\n"
    )


torch.cuda.empty_cache = _empty_cache
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.stdout = sys.stderr  # the script's own prints go to stderr
with Trace():
    runpy.run_path(script, run_name="__main__")
