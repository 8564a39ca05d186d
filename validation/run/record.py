"""Run a PyTorch script in-process and record the CUDA allocator's figures at each phase boundary.

    python record.py SCRIPT [ARGS...]

SCRIPT runs as `__main__` (runpy) with sys.argv and sys.path[0] as if it had been run directly. Before
every call of torch.cuda.reset_peak_memory_stats (also reached through reset_max_memory_allocated and
torch.accelerator.reset_peak_memory_stats) and once at the end of the script (normal return, sys.exit,
or an uncaught exception, whose type is recorded and which is then re-raised), one JSON line is appended
to $OUT_JSONL (default: stdout):

    {"script", "phase": "phase0" | "phase1" | ... | "end", "allocated", "peak_allocated", "reserved",
     "peak_reserved", "requested", "num_alloc_retries", "num_ooms", "exception", "wall_s"}

phaseN holds the figures of the interval that the N-th reset closes (phase0: from the start of the script
to the first reset). The harness only reads torch.cuda.memory_stats(): it creates no tensor and makes no
CUDA call of its own. torch is not imported before the script imports it (an import hook patches torch
right after its own import finishes), so a script that sets PYTORCH_CUDA_ALLOC_CONF before `import torch`
sees the same process state as when run directly. When CUDA was never initialized (a CPU smoke run) the
figures are null and "note" says why.

Ranks started by torch.multiprocessing.spawn / start_processes are other processes whose allocators the
parent's stats do not see: each child (this module imported there as `record`, from the parent's sys.path)
records its own phases and its "end" into the same $OUT_JSONL, in the same schema, and the parent writes
no "end" of its own when it never initialized CUDA itself (every line then is the ranks'; run with
nprocs=1 so that one rank's lines follow each other).
"""

import importlib.abc
import importlib.util
import json
import os
import runpy
import sys
import time

_state = {"phase": 0, "script": None, "out": None, "t0": time.perf_counter(), "torch": None, "children": 0}
_THIS = sys.modules[__name__]  # this module object, also under the name "record" (see _ChildRecorder)

_FIELDS = {
    "allocated": "allocated_bytes.all.current",
    "peak_allocated": "allocated_bytes.all.peak",
    "reserved": "reserved_bytes.all.current",
    "peak_reserved": "reserved_bytes.all.peak",
    "requested": "requested_bytes.all.current",
    "num_alloc_retries": "num_alloc_retries",
    "num_ooms": "num_ooms",
}


def _write(line):
    out = _state["out"]
    if out is None:
        path = os.environ.get("OUT_JSONL")
        out = open(path, "a", buffering=1) if path else sys.__stdout__
        _state["out"] = out
    out.write(line + "\n")
    out.flush()


def _emit(phase, device=None, exception=None):
    rec = {"script": _state["script"], "phase": phase}
    torch = _state["torch"]
    note = None
    if torch is None:
        note = "torch never imported"
    elif not torch.cuda.is_initialized():  # pure check: never creates a context
        note = "cuda not initialized (no GPU or never used): no figures"
    if note is None:
        stats = torch.cuda.memory_stats(device)
        rec.update({k: stats.get(v, 0) for k, v in _FIELDS.items()})
    else:
        rec.update(dict.fromkeys(_FIELDS))
        rec["note"] = note
    rec["exception"] = exception
    rec["wall_s"] = round(time.perf_counter() - _state["t0"], 3)
    _write(json.dumps(rec))


def _patch(torch):
    """Wrap the peak-reset entry points of an imported torch (once)."""
    _state["torch"] = torch
    mem = torch.cuda.memory
    orig = mem.reset_peak_memory_stats
    if getattr(orig, "_recorded", False):
        return

    def reset_peak_memory_stats(device=None):
        _emit(f"phase{_state['phase']}", device)
        _state["phase"] += 1
        return orig(device)

    reset_peak_memory_stats._recorded = True
    reset_peak_memory_stats.__doc__ = orig.__doc__
    mem.reset_peak_memory_stats = reset_peak_memory_stats  # reset_max_memory_allocated calls this name
    torch.cuda.reset_peak_memory_stats = reset_peak_memory_stats
    acc = getattr(torch, "accelerator", None)
    acc_orig = getattr(acc, "reset_peak_memory_stats", None)
    if acc_orig is not None:

        def acc_reset_peak_memory_stats(device_index=None, /):
            _emit(f"phase{_state['phase']}", device_index)
            _state["phase"] += 1
            return acc_orig(device_index)

        acc.reset_peak_memory_stats = acc_reset_peak_memory_stats
    spawn_mod = sys.modules.get("torch.multiprocessing.spawn")
    sp_orig = getattr(spawn_mod, "start_processes", None)
    if sp_orig is not None and _state["script"] is not None:

        def start_processes(fn, args=(), nprocs=1, *rest, **kwargs):
            # pickled by reference as record._ChildRecorder: the child imports this file by that name
            here = os.path.dirname(os.path.abspath(__file__))
            if here not in sys.path:
                sys.path.append(here)
            sys.modules.setdefault("record", _THIS)
            _state["children"] += 1
            return sp_orig(_ChildRecorder(fn, _state["script"]), args, nprocs, *rest, **kwargs)

        spawn_mod.start_processes = start_processes  # spawn() calls this module global
        torch.multiprocessing.start_processes = start_processes


class _ChildRecorder:
    """fn of a spawned rank, recorded in the child as main() records a script (phases and "end")."""

    __module__ = "record"

    def __init__(self, fn, script):
        self.fn, self.script = fn, script

    def __call__(self, *args):
        _state.update(script=self.script, phase=0, t0=time.perf_counter())
        _patch(sys.modules["torch"])
        try:
            self.fn(*args)
        except SystemExit as e:
            _emit("end", exception="SystemExit" if e.code not in (None, 0) else None)
            raise
        except BaseException as e:
            _emit("end", exception=type(e).__name__)
            raise
        _emit("end")


class ImportHook(importlib.abc.MetaPathFinder):
    """Calls `patch(module)` as soon as `import NAME` has finished, without importing it earlier: main()'s
    for torch, convlog/sitecustomize.py's for the twin's conv kernels. It leaves sys.meta_path at the
    first lookup of NAME; with `stay`, it goes back to the front after each (a lookup need not import)."""

    def __init__(self, name, patch, stay=False):
        self.name, self.patch, self.stay = name, patch, stay

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            if self.stay:
                sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            self.patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: python record.py SCRIPT [ARGS...]")
    script = sys.argv[1]
    _state["script"] = os.path.splitext(os.path.basename(script))[0]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    if "torch" in sys.modules:
        _patch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, ImportHook("torch", _patch))
    _state["t0"] = time.perf_counter()
    try:
        script_globals = runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        failed = e.code not in (None, 0)
        _emit("end", exception="SystemExit" if failed else None)
        raise
    except BaseException as e:
        _emit("end", exception=type(e).__name__)  # the traceback still holds the script's frames
        raise
    torch = _state["torch"]
    if not (_state["children"] and torch is not None and not torch.cuda.is_initialized()):
        _emit("end")  # script_globals (a copy of the script's namespace) keeps its objects alive until here
    del script_globals


if __name__ == "__main__":
    main()
