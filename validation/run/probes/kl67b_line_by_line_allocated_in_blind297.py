"""Session 67, helper kl: where blind297's kl04 and kl05 part from the twin in allocated memory.
Runs each named blind297 script (default kl04 kl05) under `sys.settrace`, printing after every executed line
of the script's own file (module level and its functions) one line "PREFIX:LINE alloc A peak P" when
memory_allocated() changed since the last line printed, so the GPU's output and the twin's diff line by line.
Run from validation/run: python3 probes/kl67b_line_by_line_allocated_in_blind297.py [kl04 kl05]"""

import glob
import os
import runpy
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def run(prefix):
    (path,) = glob.glob(os.path.join(HERE, "..", "blind297", prefix + "_*.py"))
    target = os.path.abspath(path)
    last = [None]

    def show(frame):
        a = torch.cuda.memory_allocated()
        if a != last[0]:
            last[0] = a
            print(f"{prefix}:{frame.f_lineno} alloc {a} peak {torch.cuda.max_memory_allocated()}")

    def local(frame, event, _arg):
        if event in ("line", "return"):
            show(frame)
        return local

    def tracer(frame, event, _arg):
        if os.path.abspath(frame.f_code.co_filename) != target:
            return None
        return local

    sys.settrace(tracer)
    try:
        runpy.run_path(target, run_name="__main__")
    finally:
        sys.settrace(None)


for p in sys.argv[1:] or ["kl04", "kl05"]:
    print("== " + p)
    run(p)
    torch.cuda.empty_cache()
