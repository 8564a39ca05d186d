"""Run a script with GradScaler's optimizer steps skipped where the GPU skipped them (a comparison aid).

    SKIP=0,1 vramscope run --gpu h100 validation/run/scaler_skips.py SCRIPT [ARGS...]

The twin carries no values for large gradients, so `_amp_foreach_non_finite_check_and_unscale_` finds
them finite and every `scaler.step(optimizer)` steps (docs/run.md, blind16/p03). On the GPU an inf or
NaN makes `GradScaler._maybe_opt_step` (torch/amp/grad_scaler.py) skip `optimizer.step()`, so an
optimizer's lazily made state (AdamW's exp_avg and exp_avg_sq) comes one or more steps later. Where a
GPU record shows which steps were skipped (the script's printed scale halving, one
`Optimizer.step#<name>.step` annotation per step taken in a memory history, the `_foreach_lerp_` count
in a per-op truth), this runs SCRIPT as `__main__` (runpy, as record.py does) with the `scaler.step`
calls numbered in SKIP (0-based, over every GradScaler in the process) returning None without stepping,
as `_maybe_opt_step` does at a non-finite gradient, so the rest of the comparison can be read apart
from that value. Only the step is skipped: the scale's update is the twin's own (no memory either way).
It is not a rule of the twin and changes no answer.
"""

import os
import runpy
import sys


def main():
    skip = {int(s) for s in os.environ.get("SKIP", "").split(",") if s.strip()}
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    import torch

    take = torch.amp.GradScaler._maybe_opt_step
    calls = [0]

    def maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        n = calls[0]
        calls[0] += 1
        if n in skip:
            return None
        return take(self, optimizer, optimizer_state, *args, **kwargs)

    torch.amp.GradScaler._maybe_opt_step = maybe_opt_step
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
