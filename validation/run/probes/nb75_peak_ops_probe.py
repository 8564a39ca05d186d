"""Where a script's peak allocated and its reserved memory move, op by op.

    python nb75_peak_ops_probe.py SCRIPT        (on the GPU; lines go to $OUT_JSONL, default stdout)
    vramscope run --gpu h100 nb75_peak_ops_probe.py SCRIPT        (the twin's lines)

SCRIPT runs in-process as `__main__` under a TorchDispatchMode. After every aten op the mode reads the
caching allocator's `allocated_bytes.all.current`, `allocated_bytes.all.peak` and
`reserved_bytes.all.current` (and `requested_bytes.all.current`) and writes one line whenever the peak
rose or reserved changed:

    {"i": op index, "op": name, "args": [shapes], "alloc": current, "peak": peak, "reserved": reserved,
     "requested": requested}

and one line `{"reset": i}` at each `reset_peak_memory_stats`. The first line where the GPU's and the
twin's files differ names the op (and its shapes) whose allocation or segment differs. Written for
blind342/me02 (peak allocated 4.5 MiB over and reserved 12 MiB over from IA3's first step on) and
blind343/mf05 (phase 4's peak allocated 23,040 bytes under).
"""

import json
import os
import runpy
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_out = open(os.environ["OUT_JSONL"], "a", buffering=1) if os.environ.get("OUT_JSONL") else sys.stdout


def _stats():
    if not torch.cuda.is_initialized():
        return (0, 0, 0, 0)
    s = torch._C._cuda_memoryStats(0)
    a = s["allocated_bytes"]["all"]
    return (
        a["current"],
        a["peak"],
        s["reserved_bytes"]["all"]["current"],
        s["requested_bytes"]["all"]["current"],
    )


def _shape(x):
    if isinstance(x, torch.Tensor):
        return [list(x.shape), str(x.dtype).removeprefix("torch.")]
    return None


class PeakOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.i = 0
        self.last = (0, 0, 0, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.i += 1
        now = _stats()
        if now[1] > self.last[1] or now[2] != self.last[2]:
            flat, _ = tree_flatten((args, kwargs))
            rec = {
                "i": self.i,
                "op": str(func),
                "args": [_shape(x) for x in flat if isinstance(x, torch.Tensor)][:6],
                "alloc": now[0],
                "peak": now[1],
                "reserved": now[2],
                "requested": now[3],
            }
            _out.write(json.dumps(rec) + "\n")
        self.last = now
        return out


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    mode = PeakOps()
    reset = torch.cuda.reset_peak_memory_stats

    def reset_and_mark(*a, **k):
        reset(*a, **k)
        _out.write(json.dumps({"reset": mode.i}) + "\n")
        mode.last = _stats()

    torch.cuda.reset_peak_memory_stats = reset_and_mark
    with mode:
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
