"""Run a PyTorch script in-process with the CUDA allocator's memory history on, and dump it at the end.

    OUT_PICKLE=FILE python history.py SCRIPT [ARGS...]

SCRIPT runs as `__main__` (runpy), as record.py runs it. Right after torch's own import finishes, the
history is switched on (`torch.cuda.memory._record_memory_history(max_entries=...)`, C++ and Python
frames; `MAX_ENTRIES`, default 2,000,000; `CONTEXT=none` records no frames, `STACKS=python` Python
frames only) and at the end (also after an uncaught exception, which is then re-raised)
`torch.cuda.memory._dump_snapshot(OUT_PICKLE)` writes the snapshot: every allocation in order with its
frames, the view to read a kernel's scratch from when the per-op truth is not enough.
"""

import importlib.abc
import importlib.util
import os
import runpy
import sys

_torch = {}


class _AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        sys.meta_path.insert(0, self)
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_record(module):
            exec_module(module)
            if module.cuda.is_available():
                context = os.environ.get("CONTEXT", "all")  # CONTEXT=none: no frames (small files)
                module.cuda.memory._record_memory_history(
                    context=None if context == "none" else context,
                    max_entries=int(os.environ.get("MAX_ENTRIES", "2000000")),
                    stacks=os.environ.get("STACKS", "all"),  # STACKS=python: no C++ frames (fast)
                )
                _torch["torch"] = module

        loader.exec_module = exec_and_record
        sys.meta_path.remove(self)
        return spec


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    sys.meta_path.insert(0, _AfterTorch())
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        torch = _torch.get("torch")
        if torch is not None:
            torch.cuda.memory._dump_snapshot(os.environ.get("OUT_PICKLE", "history.pickle"))


if __name__ == "__main__":
    main()
