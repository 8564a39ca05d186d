"""blind336/ly03 and ly02 (session 79): which thread stacks and mappings enter the host-built model's
address range, and when, in a PLAIN run (no memory history).

nd79_layout_at_end.py showed (H100, plain runs): ly03's 24 FFN weights and its embedding are glibc's
own mappings as in the history run, at the same places relative to each other; what differs is that
the process's first CUDA driver call (cuInit, from `torch._C._cuda_getDeviceCount`) comes after the
build, so its thread's 8 MiB stack lies in the hole between the upper FFN weights and the embedding
and its arena and 8 GiB reservation below the weights. At the end an 8 MiB stack also fills the top
of the other hole (between the two blocks of weights). The twin answers ly03's plain record in every
phase when that second stack is laid out there (helper ne, session 79): this probe checks that it is
the context's own thread, made at the first copy before any weight is freed, and records what else
(16 x 2 MiB stacks, ~21 and ~28 MiB anonymous mappings, cuDNN's graph library) enters the freed
range during the move and the first training step.

Runs SCRIPT in-process as `__main__` (runpy, as record.py does), records /proc/self/maps, the thread
count and a short Python stack at:
  - "devcount0"/"devcount1": before and after the first `torch._C._cuda_getDeviceCount` (cuInit),
  - "lazy_init": the first `torch.cuda._lazy_init` (before it runs),
  - "first_copy": right after the first tensor the outermost `Module._apply` makes (the context now
    exists; no CPU weight freed yet),
  - "moved": when the outermost `Module._apply` returns,
  - "step0"/"step1": entry and exit of the first `Trainer.training_step`,
then the phase figures and every segment at the end, into $OUT_JSON.

    P=validation/run/probes/ne79_ctx_stack.py
    for s in ly03 ly02; do OUT_JSON=$OUT/ne79_${s}.json python $P validation/run/blind336/${s}_*.py; done

About 15 s each on an H100. Run each alone. Nothing is allocated by the probe between checkpoints
except the maps' text (read into Python's heap: glibc's threshold is above its size).
"""

import importlib.abc
import importlib.util
import json
import os
import runpy
import sys
import traceback

_state = {"torch": None, "phases": [], "checkpoints": [], "seen": set(), "apply_depth": 0}


def _maps():
    with open("/proc/self/maps") as f:
        return f.read().splitlines()


def _threads():
    return len(os.listdir("/proc/self/task"))


def _checkpoint(tag):
    if tag in _state["seen"]:
        return
    _state["seen"].add(tag)
    stack = [
        f"{fr.filename.rsplit('/', 2)[-1]}:{fr.lineno} {fr.name}" for fr in traceback.extract_stack()[-12:-2]
    ]
    _state["checkpoints"].append({"tag": tag, "threads": _threads(), "caller": stack, "maps": _maps()})


def _stats(torch):
    s = torch.cuda.memory_stats()
    return {
        "allocated": s.get("allocated_bytes.all.current", 0),
        "peak_allocated": s.get("allocated_bytes.all.peak", 0),
        "reserved": s.get("reserved_bytes.all.current", 0),
        "peak_reserved": s.get("reserved_bytes.all.peak", 0),
    }


def _storages(torch):
    """The script's module-level nn.Modules' CPU storages of 1 MiB or more: (address, bytes)."""
    main = sys.modules.get("__main__")
    out, seen = [], set()
    for obj in list(vars(main).values()) if main is not None else []:
        if not isinstance(obj, torch.nn.Module):
            continue
        for t in list(obj.parameters()) + list(obj.buffers()):
            if t.device.type != "cpu":
                continue
            st = t.untyped_storage()
            if st.data_ptr() not in seen and st.nbytes() >= 1 << 20:
                seen.add(st.data_ptr())
                out.append([st.data_ptr(), st.nbytes()])
    return out


def _patch(torch):
    _state["torch"] = torch
    count = torch._C._cuda_getDeviceCount

    def _cuda_getDeviceCount():
        _checkpoint("devcount0")
        n = count()
        _checkpoint("devcount1")
        return n

    torch._C._cuda_getDeviceCount = _cuda_getDeviceCount
    orig_reset = torch.cuda.memory.reset_peak_memory_stats

    def reset_peak_memory_stats(device=None):
        _state["phases"].append(_stats(torch))
        return orig_reset(device)

    torch.cuda.memory.reset_peak_memory_stats = reset_peak_memory_stats
    torch.cuda.reset_peak_memory_stats = reset_peak_memory_stats
    lazy_init = torch.cuda._lazy_init

    def _lazy_init():
        if not torch.cuda.is_initialized() and "lazy_init" not in _state["seen"]:
            _checkpoint("lazy_init")
            _state["storages"] = _storages(torch)
        return lazy_init()

    torch.cuda._lazy_init = _lazy_init
    apply = torch.nn.Module._apply

    def _apply(self, fn, *args, **kwargs):
        outer = _state["apply_depth"] == 0
        _state["apply_depth"] += 1
        try:
            if outer and "first_copy" not in _state["seen"]:

                def first(t, fn=fn):
                    out = fn(t)
                    if getattr(out, "is_cuda", False):
                        _checkpoint("first_copy")
                    return out

                res = apply(self, first, *args, **kwargs)
                if "first_copy" in _state["seen"]:
                    _checkpoint("moved")
                return res
            return apply(self, fn, *args, **kwargs)
        finally:
            _state["apply_depth"] -= 1

    torch.nn.Module._apply = _apply


def _patch_trainer(transformers_trainer):
    cls = transformers_trainer.Trainer
    step = cls.training_step

    def training_step(self, *args, **kwargs):
        _checkpoint("step0")
        out = step(self, *args, **kwargs)
        _checkpoint("step1")
        return out

    cls.training_step = training_step


class _After(importlib.abc.MetaPathFinder):
    """Patches torch right after its import, and transformers' Trainer after its module's."""

    def find_spec(self, name, path=None, target=None):
        if name not in ("torch", "transformers.trainer"):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            (_patch if name == "torch" else _patch_trainer)(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    if "torch" in sys.modules:  # already imported (under the twin): patched now, as record.py does
        _patch(sys.modules["torch"])
    if "transformers.trainer" in sys.modules:
        _patch_trainer(sys.modules["transformers.trainer"])
    sys.meta_path.insert(0, _After())
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        torch = _state["torch"]
        segs = [
            {"address": s["address"], "total_size": s["total_size"]}
            for s in torch.cuda.memory._snapshot()["segments"]
        ]
        out = {
            "phases": _state["phases"] + [_stats(torch)],
            "segments": segs,
            "storages_at_lazy_init": _state.get("storages"),
            "checkpoints": _state["checkpoints"],
            "maps_end": _maps(),
            "threads_end": _threads(),
        }
        with open(os.environ.get("OUT_JSON", "ne79_ctx_stack.json"), "w") as f:
            json.dump(out, f)
        print("checkpoints", [(c["tag"], c["threads"]) for c in _state["checkpoints"]], file=sys.__stderr__)
        print("phases", [(p["peak_allocated"], p["reserved"]) for p in out["phases"]], file=sys.__stderr__)


if __name__ == "__main__":
    main()
