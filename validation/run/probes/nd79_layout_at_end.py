"""blind336/ly03 (session 79): where a PLAIN run's segments lie, to compare with the history run.

ly03's plain records (run_blind336_h100 and session 79's two repeats) agree with each other and differ
from session 75's history.py run (history_ly03_s75_h100) in phase 2 by one 48 MiB segment; the twin has
the history run's reserved. A plain run has no history, so its segment addresses were never seen. This
wrapper runs SCRIPT in-process as `__main__` (runpy, as record.py and history.py do: same sys.argv and
sys.path[0]) and touches nothing until the script has returned; then it writes to $OUT_JSON:
  - the phase figures at every torch.cuda.reset_peak_memory_stats (allocated, peaks, reserved; read from
    memory_stats only, as record.py reads them),
  - every segment of the caching allocator at the end (`torch.cuda.memory._snapshot()["segments"]`:
    address, total_size, stream; available without history; ly03 never frees a segment, so all of
    them), and
  - the host-built model's storages (1 MiB or more) at that moment: address, bytes, and whether glibc
    mapped each on its own (its chunk header; read, nothing allocated),
  - /proc/self/maps when Python first initializes CUDA (`torch.cuda._lazy_init`, before it runs: where
    the host-built model's tensors lie, rule 11) and at the end (every host and driver mapping).
With HIST=1 it first switches the history on right after `import torch`, exactly as history.py does
(context "all", stacks "all", max_entries 2,000,000), so the two runs differ only in that.

    P=validation/run/probes/nd79_layout_at_end.py; S=validation/run/blind336/ly03_*.py
    OUT_JSON=plain.json python $P $S
    HIST=1 OUT_JSON=hist.json python $P $S

Each about 15 s on an H100. Run each alone (no other GPU process at the same time).
"""

import importlib.abc
import importlib.util
import json
import os
import runpy
import sys

_state = {"torch": None, "phases": [], "maps_before_init": None}


def _glibc_chunk(ptr, nbytes):
    """(mmapped, mapping length) of the glibc chunk holding a CPU storage, read from its header
    (malloc/malloc.c: prev_size, then size with IS_MMAPPED = 2; `_int_memalign` keeps the leading
    offset in prev_size), as vramscope's `_glibc_mapping` reads it; nothing is allocated."""
    import ctypes

    if ptr % 4096 < 16:
        return (False, None)
    size = ctypes.c_size_t.from_address(ptr - 8).value
    prev = ctypes.c_size_t.from_address(ptr - 16).value
    return (bool(size & 2), (size & ~7) + prev if size & 2 else None)


def _host_model_storages():
    """The script's host-built model (`__main__`'s module-level nn.Modules, runpy's module is in
    sys.modules while it runs) at Python's first CUDA init: each storage of 1 MiB or more, with its
    address and whether glibc mapped it on its own (rule 11 lays out only those)."""
    import torch

    main = sys.modules.get("__main__")
    out, seen = [], set()
    for name, obj in list(vars(main).items()) if main is not None else []:
        if not isinstance(obj, torch.nn.Module):
            continue
        for t in list(obj.parameters()) + list(obj.buffers()):
            if t.device.type != "cpu":
                continue
            st = t.untyped_storage()
            ptr, n = st.data_ptr(), st.nbytes()
            if ptr in seen or n < 1 << 20:
                continue
            seen.add(ptr)
            mm, length = _glibc_chunk(ptr, n)
            out.append([name, ptr, n, mm, length])
    return out


def _read_maps():
    with open("/proc/self/maps") as f:
        return f.read().splitlines()


def _stats(torch):
    s = torch.cuda.memory_stats()
    return {
        "allocated": s.get("allocated_bytes.all.current", 0),
        "peak_allocated": s.get("allocated_bytes.all.peak", 0),
        "reserved": s.get("reserved_bytes.all.current", 0),
        "peak_reserved": s.get("reserved_bytes.all.peak", 0),
    }


def _patch(torch):
    _state["torch"] = torch
    if os.environ.get("HIST") == "1" and torch.cuda.is_available():
        torch.cuda.memory._record_memory_history(context="all", max_entries=2000000, stacks="all")
    orig = torch.cuda.memory.reset_peak_memory_stats

    def reset_peak_memory_stats(device=None):
        _state["phases"].append(_stats(torch))
        return orig(device)

    torch.cuda.memory.reset_peak_memory_stats = reset_peak_memory_stats
    torch.cuda.reset_peak_memory_stats = reset_peak_memory_stats
    lazy_init = torch.cuda._lazy_init

    def _lazy_init():
        # the process's mappings when CUDA is first initialized from Python (the host-built model's
        # tensors are mapped by then; read into the heap: glibc's threshold is above its size)
        if _state["maps_before_init"] is None and not torch.cuda.is_initialized():
            _state["maps_before_init"] = _read_maps()
            _state["host_storages"] = _host_model_storages()
            # how many strings CPython has interned (Python 3.12): its dict's table sizes are what
            # raised glibc's threshold (docs/driver-placement.md, session 42)
            interned = getattr(sys, "getunicodeinternedsize", None)
            _state["interned"] = interned() if interned else None
        return lazy_init()

    torch.cuda._lazy_init = _lazy_init


class _AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    if "torch" in sys.modules:  # already imported (under the twin): patched now, as record.py does
        _patch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _AfterTorch())
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        torch = _state["torch"]
        phases = _state["phases"] + [_stats(torch)]
        segs = [
            {"address": s["address"], "total_size": s["total_size"], "stream": s["stream"]}
            for s in torch.cuda.memory._snapshot()["segments"]
        ]
        out = {
            "hist": os.environ.get("HIST") == "1",
            "phases": phases,
            "segments": segs,
            "maps_before_init": _state["maps_before_init"],
            "host_storages": _state.get("host_storages"),
            "interned_at_init": _state.get("interned"),
            "maps": _read_maps(),
        }
        with open(os.environ.get("OUT_JSON", "layout.json"), "w") as f:
            json.dump(out, f)
        print("phases", [(p["peak_allocated"], p["reserved"]) for p in phases], file=sys.__stderr__)
        hs = _state.get("host_storages") or []
        sizes = sorted({(n, mm) for _, _, n, mm, _ in hs})
        print("host storages at CUDA init (bytes, glibc-mapped):", sizes, file=sys.__stderr__)
        print("interned strings at CUDA init:", _state.get("interned"), file=sys.__stderr__)


if __name__ == "__main__":
    main()
