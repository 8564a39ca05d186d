"""Run a script until its first `copy.deepcopy` of a module and write the process's memory maps there.

    OUT_DIR=DIR python maps_at_first_deepcopy.py SCRIPT

At the first `copy.deepcopy` of an `nn.Module` (blind225/hq03: after its host-built timm ViT-B is moved
to the GPU) the process writes DIR/maps.txt (`/proc/self/maps`) and DIR/segments.json (the caching allocator's
segments: address, size, stream), then exits. For placing the driver's mappings against the CUDA
context's (docs/driver-placement.md)."""

import copy
import json
import os
import runpy
import sys

_original = copy.deepcopy


def _dump_and_exit(obj, *args, **kwargs):
    import torch

    if not isinstance(obj, torch.nn.Module):
        return _original(obj, *args, **kwargs)
    out = os.environ.get("OUT_DIR", ".")
    with open("/proc/self/maps") as src, open(os.path.join(out, "maps.txt"), "w") as dst:
        dst.write(src.read())
    segments = [
        {"address": s["address"], "total_size": s["total_size"], "stream": s["stream"]}
        for s in torch.cuda.memory_snapshot()
    ]
    with open(os.path.join(out, "segments.json"), "w") as f:
        json.dump(segments, f)
    print("maps written at the first deepcopy", flush=True)
    os._exit(0)


copy.deepcopy = _dump_and_exit
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
