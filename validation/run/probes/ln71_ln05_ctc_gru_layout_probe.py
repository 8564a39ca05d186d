"""ln71 probe: blind325/ln05's allocator state step by step (its phase-end allocated misses of
-569,344 / -137,216 / +530,432 bytes on the H100, session 71 call 1, with ln01-ln04 exact).

Runs the blind script as __main__ and prints memory_allocated after each forward of the model,
backward and optimizer step, and at each phase end (each reset_peak_memory_stats) every segment of
both pools by address (A = allocated block, f = free, with sizes). The twin prints the same lines
(`python -m vramscope run --gpu h100 validation/run/probes/ln71_ln05_ctc_gru_layout_probe.py SCRIPT`).

Usage: python3 validation/run/probes/ln71_ln05_ctc_gru_layout_probe.py validation/run/blind325/ln05_*.py"""

import runpy
import sys

import torch
from torch.nn.modules.module import register_module_forward_hook
from torch.optim.optimizer import register_optimizer_step_post_hook

script = sys.argv[1]
sys.argv = sys.argv[1:]
phase = [0]
count = [0]


def layout(tag):
    segs = sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])
    print(f"{tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    for seg in segs:
        blocks = " ".join(
            f"{'A' if b['state'] == 'active_allocated' else 'f'}{b['size']}" for b in seg["blocks"]
        )
        print(f"  {tag} {seg['segment_type']} seg {seg['total_size']}: {blocks}")


def mark(what):
    count[0] += 1
    print(f"p{phase[0]} #{count[0]} {what}: allocated {torch.cuda.memory_allocated()}")


real_reset = torch.cuda.reset_peak_memory_stats


def reset(*args, **kwargs):
    layout(f"phase{phase[0]}-end")
    phase[0] += 1
    return real_reset(*args, **kwargs)


def forward_hook(module, args, out):
    if type(module).__name__ == "Recognizer":
        mark("forward")


real_backward = torch.Tensor.backward


def backward(self, *args, **kwargs):
    out = real_backward(self, *args, **kwargs)
    mark("backward")
    return out


torch.cuda.reset_peak_memory_stats = reset
register_module_forward_hook(forward_hook)
torch.Tensor.backward = backward
register_optimizer_step_post_hook(lambda opt, a, k: mark("step"))
runpy.run_path(script, run_name="__main__")
layout("final")
