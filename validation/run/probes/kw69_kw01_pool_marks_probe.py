"""Session 69, helper kw: where blind308/kw01's extra 2 MiB segment of the twin comes from (the twin is
+2,097,152 reserved over the H100 in phases 1-2, every other figure exact). Runs the blind script unchanged
(runpy, as `__main__`) and prints, before every `optimizer.zero_grad()` and every peak reset, the small and
large pools' reserved bytes, segment counts and the small pool's peak. Run from validation/run:
`python3 probes/kw69_kw01_pool_marks_probe.py`. Plain python3, < 30 s, < 6 GB."""

import glob
import os
import runpy
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = glob.glob(os.path.join(HERE, "..", "blind308", "kw01_*.py"))[0]


def pools(tag):
    s = torch.cuda.memory_stats()
    print(
        f"P {tag}: small {s['reserved_bytes.small_pool.current']} ({s['segment.small_pool.current']} segs, "
        f"peak {s['reserved_bytes.small_pool.peak']}) large {s['reserved_bytes.large_pool.current']} "
        f"({s['segment.large_pool.current']} segs) alloc small {s['allocated_bytes.small_pool.current']}"
    )


_zero_grad = torch.optim.SGD.zero_grad
_reset = torch.cuda.reset_peak_memory_stats
_steps = [0]


def zero_grad(self, *args, **kwargs):
    pools(f"step {_steps[0]}")
    _steps[0] += 1
    return _zero_grad(self, *args, **kwargs)


def reset(*args, **kwargs):
    pools("reset")
    return _reset(*args, **kwargs)


torch.optim.SGD.zero_grad = zero_grad
torch.cuda.reset_peak_memory_stats = reset
sys.argv = [SCRIPT]
runpy.run_path(SCRIPT, run_name="__main__")
pools("end")
