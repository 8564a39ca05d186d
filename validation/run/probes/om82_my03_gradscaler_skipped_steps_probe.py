"""Which of blind360/my03's GradScaler steps the GPU skips (session 82, helper om).

my03 (Time Series Transformer, fp16 autocast, torch.amp.GradScaler at its default init_scale 65536, Adam
foreach) trains 3 steps at batch 128 and 3 at batch 256, then generates. The twin does not carry gradient
values: `_amp_foreach_non_finite_check_and_unscale_` finds them finite and every scaler.step() runs Adam's
step (state made at the first). On the H100 the run's phases 0-2 equal the twin's and phases 3 and end hold
2 MiB less reserved (one small segment): the twin with the first step skipped
(`SKIP=0 vramscope run --gpu h100 validation/run/scaler_skips.py .../my03_*.py`) gives all five phases'
figures of the H100 record byte for byte; no skip, SKIP=1, 2, 3 keep the +2 MiB, and SKIP=0,1 or SKIP=1
move phase 1 and 2 figures off the record. This runs my03 unchanged (runpy, as __main__) with
GradScaler.update wrapped to print, per step: the scale before the update, the found-inf count, whether
Adam holds state for the first parameter, torch.cuda.memory_allocated(); the script's own phase lines
follow.

Run from the repository root: `python3 validation/run/probes/om82_my03_gradscaler_skipped_steps_probe.py`
(the script ran 16 s on the H100; < 4 GB allocated, 15 GB reserved).
The twin's lines (`vramscope run --gpu h100`, branch om-s82 on main 1c561bd0; allocated is read before
zero_grad, gradients live):
    OM82 step 0 scale 65536.0 found_inf 0 adam_state True allocated 81169920
    OM82 step 1 scale 65536.0 found_inf 0 adam_state True allocated 82515456
    OM82 step 2 scale 65536.0 found_inf 0 adam_state True allocated 82515456
    OM82 step 3 scale 65536.0 found_inf 0 adam_state True allocated 83588608
    OM82 step 4 scale 65536.0 found_inf 0 adam_state True allocated 84187648
    OM82 step 5 scale 65536.0 found_inf 0 adam_state True allocated 84187648
and with the first step skipped (`SKIP=0 vramscope run --gpu h100 validation/run/scaler_skips.py THIS`),
step 0 reads `adam_state False allocated 75712000` (the other lines as above; the found-inf count and scale
stay the twin's), phase 3 `max reserved 15688794112`, the H100 record's. The probe's reads move no phase
figure in the twin.
A GPU line `OM82 step 0 ... found_inf 1 (or more) adam_state False` (then scale 32768 at step 1) says the
+2 MiB is the skipped first step, a value the twin does not carry, not an allocator rule."""

import glob
import os
import runpy
import sys

import torch
from torch.amp import grad_scaler

here = os.path.dirname(os.path.abspath(__file__))
(script,) = glob.glob(os.path.join(here, "..", "blind360", "my03_*.py"))
orig_update = grad_scaler.GradScaler.update
orig_step = grad_scaler.GradScaler.step
state = {"n": 0, "opt": None}


def step(self, optimizer, *args, **kwargs):
    state["opt"] = optimizer
    return orig_step(self, optimizer, *args, **kwargs)


def update(self, new_scale=None):
    found = 0.0
    for st in self._per_optimizer_states.values():
        for v in st["found_inf_per_device"].values():
            found += float(v.item())
    scale = float(self._scale.item())
    opt = state["opt"]
    p0 = opt.param_groups[0]["params"][0]
    has_state = bool(opt.state.get(p0))
    print(
        f"OM82 step {state['n']} scale {scale} found_inf {found:.0f} adam_state {has_state} "
        f"allocated {torch.cuda.memory_allocated()}",
        flush=True,
    )
    state["n"] += 1
    return orig_update(self, new_scale)


grad_scaler.GradScaler.step = step
grad_scaler.GradScaler.update = update
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
