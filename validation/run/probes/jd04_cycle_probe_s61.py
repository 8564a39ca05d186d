"""GPU probe for blind263/jd04's reference cycle (session 61, lead; not run yet).

Session 60's H200 run of jd04_gc_probe_s59.py showed one generation-2 collection in phase 4 freeing exactly
phase 3's caches plus 14,135,808 bytes: a reference cycle holds CUDA tensors. This names the cycle: every
collection runs with `gc.DEBUG_SAVEALL` (set in the collector's "start" callback, read by the collection
itself), so what it finds unreachable lands in `gc.garbage`; the "stop" callback prints, when that garbage
holds a CUDA tensor, the generation, the garbage's object types, its frames (code, file, line) and each
CUDA tensor (shape, dtype, storage bytes, the chain of its first referrers in the garbage;
FakeTensors, which report cuda too, left out), then clears the garbage so the memory is freed as without
the probe.

Run: python validation/run/probes/jd04_cycle_probe_s61.py"""

import collections
import gc
import os
import runpy
import sys
import types
import weakref

import torch

here = os.path.dirname(os.path.abspath(__file__))
d = os.path.join(here, "..", "blind263")
script = os.path.join(d, next(f for f in sorted(os.listdir(d)) if f.startswith("jd04")))
n = [0]


def describe(o):
    if type(o) in (weakref.ProxyType, weakref.CallableProxyType):
        return "weakproxy"
    if type(o).__name__ == "cell":
        return "cell"
    if isinstance(o, types.FrameType):
        return f"frame {o.f_code.co_name} {os.path.basename(o.f_code.co_filename)}:{o.f_lineno}"
    if isinstance(o, types.FunctionType):
        return f"function {o.__module__}.{o.__qualname__}"
    if isinstance(o, dict):
        return f"dict keys {sorted(map(str, o.keys()))[:8]}"
    if isinstance(o, (list, tuple)):
        return f"{type(o).__name__} len {len(o)}"
    if isinstance(o, torch.Tensor):
        return f"tensor {tuple(o.shape)} {o.dtype} {o.device}"
    return f"{type(o).__module__}.{type(o).__qualname__}"


def cb(phase, info):
    if phase == "start":
        gc.set_debug(gc.DEBUG_SAVEALL)
        return
    gc.set_debug(0)
    garbage = list(gc.garbage)
    gc.garbage.clear()
    # real tensors only (not FakeTensors, which report cuda too); type() also spares a dead weakproxy
    cuda = [o for o in garbage if type(o) in (torch.Tensor, torch.nn.Parameter) and o.is_cuda]
    n[0] += 1
    if not cuda:
        return
    ids = {id(o) for o in garbage}
    byte = sum(t.untyped_storage().nbytes() for t in cuda)
    print(
        f"== collection {n[0]} gen {info['generation']}: {len(garbage)} objects, {len(cuda)} cuda tensors,"
        f" {byte} storage bytes, allocated {torch.cuda.memory_allocated()}"
    )
    print("  types:", collections.Counter(type(o).__qualname__ for o in garbage).most_common(25))
    for o in garbage:
        if type(o) in (types.FrameType, types.TracebackType):
            print("  ", describe(o))
    for t in cuda[:40]:
        # the chain of first referrers inside the garbage, up to eight links: what holds the tensor
        chain, cur, seen = [], t, {id(t)}
        for _ in range(8):
            refs = [r for r in gc.get_referrers(cur) if id(r) in ids and id(r) not in seen]
            if not refs:
                break
            cur = refs[0]
            seen.add(id(cur))
            chain.append(describe(cur))
        print(f"   cuda {tuple(t.shape)} {t.dtype} {t.untyped_storage().nbytes()} <- " + " <- ".join(chain))
    sys.stdout.flush()
    del garbage, cuda


gc.callbacks.append(cb)
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
gc.callbacks.remove(cb)
