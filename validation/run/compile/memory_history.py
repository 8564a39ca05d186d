"""Run SCRIPT as `__main__` with the CUDA caching allocator's history recorded (Python stacks) and
dump the snapshot to $SNAP at the end (`torch.cuda.memory._dump_snapshot`; read it with
`python -m vramscope inspect` or PyTorch's memory_viz).

    SNAP=OUT.pickle python memory_history.py SCRIPT [ARGS...]
"""

import os
import runpy
import sys

import torch

torch.cuda.memory._record_memory_history("all", context="all", stacks="python", max_entries=1_000_000)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(script))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    torch.cuda.memory._dump_snapshot(os.environ["SNAP"])
