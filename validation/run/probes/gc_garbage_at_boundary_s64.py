"""What cyclic garbage holds CUDA tensors at a phase boundary (session 64, helper gc).

    PH=3 vramscope run --gpu h200 probes/gc_garbage_at_boundary_s64.py blind263/jd04_*.py
    PH=3 EXTRA=N ...   (twin only: N added to CPython's long_lived_total at the start and
                        after each full collection)

At the PH-th `torch.cuda.reset_peak_memory_stats()` (the blind scripts' phase boundary) one
collection runs with `gc.DEBUG_SAVEALL`: the garbage's tensors by type and shape, its object
types, and for each real (non-fake) tensor the chain of its first referrers inside the garbage;
then the garbage is collected again and the CUDA bytes it freed printed. That collection moves
the script's later ones: only the figures up to phase PH are the script's. It found
blind263/jd04's second-prefill caches held by `Module._call_impl`'s hook-path closure
(75afacf7)."""

import collections
import gc
import os
import runpy
import sys

import torch

PH = int(os.environ.get("PH", "3"))
if os.environ.get("EXTRA"):
    from vramscope import _gccount

    _extra = int(os.environ["EXTRA"])
    _cell = _gccount.LONG_LIVED_TOTAL
    _cell.value += _extra

    def _after_full(phase, info, cell=_cell, extra=_extra):
        if phase == "stop" and info["generation"] == 2:
            cell.value += extra

    gc.callbacks.append(_after_full)
_n = [0]
orig = torch.cuda.reset_peak_memory_stats


def reset(*a, **kw):
    if _n[0] == PH:
        before = torch.cuda.memory_allocated()
        gc.set_debug(gc.DEBUG_SAVEALL)
        n = gc.collect()
        gc.set_debug(0)
        after = torch.cuda.memory_allocated()
        g = list(gc.garbage)
        gc.garbage.clear()
        ts = [o for o in g if issubclass(type(o), torch.Tensor)]
        print(
            f"DIAG phase{PH} collected {n} freed {before - after} tensors {len(ts)}",
            flush=True,
        )
        sizes = collections.Counter()
        for t in ts:
            try:
                sizes[(type(t).__name__, tuple(t.shape), str(t.dtype), t.device.type)] += 1
            except Exception as e:
                sizes[repr(e)[:40]] += 1
        for k, v in sizes.most_common(30):
            print("  T", v, k)
        types = collections.Counter(type(o).__name__ for o in g)
        print("  types", types.most_common(25))
        frames = [o for o in g if type(o).__name__ == "frame"]
        for f in frames[:0]:
            print("  F", f.f_code.co_filename.split("/")[-1], f.f_code.co_name, f.f_lineno)
        import types as _types
        import weakref as _wr

        def describe(o):
            if type(o) in (_wr.ProxyType, _wr.CallableProxyType):
                return "weakproxy"
            if type(o).__name__ == "cell":
                return "cell"
            if isinstance(o, _types.FrameType):
                return f"frame {o.f_code.co_name} {os.path.basename(o.f_code.co_filename)}:{o.f_lineno}"
            if isinstance(o, _types.FunctionType):
                return f"function {o.__module__}.{o.__qualname__}"
            if isinstance(o, dict):
                return f"dict keys {sorted(map(str, o.keys()))[:8]}"
            if isinstance(o, (list, tuple)):
                return f"{type(o).__name__} len {len(o)}"
            if isinstance(o, torch.Tensor):
                return f"tensor {tuple(o.shape)} {o.dtype} {o.device}"
            return f"{type(o).__module__}.{type(o).__qualname__}"

        ids = {id(o) for o in g}
        real = [o for o in g if type(o) in (torch.Tensor, torch.nn.Parameter)]
        for t in real[:30]:
            chain, cur, seen = [], t, {id(t)}
            for _ in range(14):
                refs = [r for r in gc.get_referrers(cur) if id(r) in ids and id(r) not in seen]
                if not refs:
                    break
                cur = refs[0]
                seen.add(id(cur))
                chain.append(describe(cur))
            print(f"   real {tuple(t.shape)} <- " + " <- ".join(chain), flush=True)
        del g, ts, frames, real, ids
        b2 = torch.cuda.memory_allocated()
        n2 = gc.collect()
        print(f"DIAG second collect {n2} freed {b2 - torch.cuda.memory_allocated()}", flush=True)
    _n[0] += 1
    return orig(*a, **kw)


torch.cuda.reset_peak_memory_stats = reset
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
