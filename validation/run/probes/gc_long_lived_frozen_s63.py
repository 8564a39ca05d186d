"""Twin-only experiment (session 63, helper gc): the frozen objects counted in CPython's `long_lived_total`.

    vramscope run --gpu h100 probes/gc_long_lived_frozen_s63.py SCRIPT [ARGS...]
    vramscope run --gpu h100 probes/gc_long_lived_frozen_s63.py probes/gc_sequence_probe_s63.py SCRIPT

A collection of generation 2 runs only where `long_lived_pending > long_lived_total / 4`
(gcmodule.c `gc_collect_generations`, 3.11 and 3.12 alike), and each sets `long_lived_total` to the
objects it leaves in generation 2. The GPU's process keeps torch's objects there (160,735 after
`import torch` on 3.11, 258,635 with dynamo and Inductor); the twin froze its whole setup (489,5xx
objects, its own included), so its total counts only what the program made since. This wrapper adds
the frozen count to the total at the start and after every full collection (`_gccount.LONG_LIVED_TOTAL`,
the interpreter's own field), then runs SCRIPT. Not in the package: the 489k overcounts the GPU's
process (the twin's own modules), and blind272's figures move either way with the harness
(jm02 exact in every phase under gc_sequence_probe_s63.py, 604,176,384 bytes off in phases 2-4
without it; jm01 off in phase 1 instead of phases 2-3).
"""

import gc
import runpy
import sys

from vramscope import _gccount

cell = _gccount.LONG_LIVED_TOTAL
cell.value += gc.get_freeze_count()


def _after_full(phase, info):
    if phase == "stop" and info["generation"] == 2:
        cell.value += gc.get_freeze_count()


gc.callbacks.append(_after_full)
print("frozen", gc.get_freeze_count(), flush=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
