"""Which of blind335/lx05's GradScaler steps the GPU skips (session 73, helper lx).

lx05 (torchvision's classification reference, ResNet-50 recipe, `--amp`) trains 6 steps under
torch.cuda.amp.GradScaler (init_scale 65536). The twin does not carry gradient values: it takes them as
finite, so every scaler.step() runs SGD's step (momentum buffers made at the first). On the GPU an inf or NaN
in the scaled fp16 gradients skips the step and halves the scale; skipped first steps move SGD's momentum
buffers (90 MiB) to a later step, and phase figures with them. This runs lx05 unchanged (runpy, as
__main__) with GradScaler.update wrapped to print, per step: the scale before the update, the found-inf
count, torch.cuda.memory_allocated() and whether SGD's first parameter has a momentum buffer yet.

Run from validation/run: `python3 probes/lx73_gradscaler_skipped_steps_probe.py` (< 60 s, < 5 GB).
The twin's lines (`vramscope run --gpu h100`, f115c561):
    LX73 step 0 scale 65536.0 found_inf 0 momentum True allocated 484642304
    LX73 step 1 scale 65536.0 found_inf 0 momentum True allocated 484807168
    LX73 step 2 scale 65536.0 found_inf 0 momentum True allocated 484020736
    LX73 step 3 scale 65536.0 found_inf 0 momentum True allocated 484904448
    LX73 step 4 scale 65536.0 found_inf 0 momentum True allocated 484020736
    LX73 step 5 scale 65536.0 found_inf 0 momentum True allocated 483168768
A GPU line with found_inf > 0 at step k says the
twin's phases 0-1 (epoch 0) differ by a skipped step there, a miss outside the twin's rules."""

import os
import runpy
import sys

import torch
from torch.amp import grad_scaler

here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(
    here, "..", "blind335",
    "lx05_torchvision_references_classification_train_resnet50_recipe_amp_gradscaler_v2_mixup_cutmix_collate_"
    "label_smoothing_norm_weight_decay_ema_cudnn_benchmark_metric_logger_inference_mode_eval.py",
)
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
    momentum = "momentum_buffer" in opt.state.get(p0, {}) and opt.state[p0]["momentum_buffer"] is not None
    print(f"LX73 step {state['n']} scale {scale} found_inf {found:.0f} momentum {momentum} "
          f"allocated {torch.cuda.memory_allocated()}", flush=True)
    state["n"] += 1
    return orig_update(self, new_scale)


grad_scaler.GradScaler.step = step
grad_scaler.GradScaler.update = update
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
