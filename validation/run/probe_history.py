"""The memory-history harness of the sparse probes (sparse_probe.py, sparse_probe2.py): each case runs
under `torch.cuda.memory._record_memory_history(stacks="python")` and keeps its allocations, frees and
segment events with the C++ and Python frames that name the op; on a machine without CUDA the cases
run with no events (a dry run of the script)."""

import os

import torch

dev = "cuda" if torch.cuda.is_available() else "cpu"
KEEP = ("at::native::", "thrust::", "cub::", "at::_ops::", "torch::autograd::")


def new_output():
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "cases": []}


def frames_of(ev):
    """Up to 12 frames of an event: ATen, CUB/thrust and autograd C++ frames, and Python lines."""
    names = []
    for f in ev.get("frames", []):
        n, filename = f.get("name", ""), f.get("filename", "")
        if any(k in n for k in KEEP) or filename.endswith(".py"):
            short = n if not filename.endswith(".py") else f"{os.path.basename(filename)}:{f.get('line')}:{n}"
            if short not in names:
                names.append(short[:160])
        if len(names) >= 12:
            break
    return names


def recorder(out):
    """`record(name, fn, **info)`: runs fn, appends the case with its events to out["cases"], returns
    fn's result."""
    H = torch.cuda.memory

    def record(name, fn, **info):
        if dev == "cpu":
            res = fn()
            out["cases"].append(dict(name=name, events=[], **info))
            return res
        torch.cuda.synchronize()
        H._record_memory_history(max_entries=100000, stacks="python")
        res = fn()
        torch.cuda.synchronize()
        snap = H._snapshot()
        H._record_memory_history(enabled=None)
        evs = []
        for tr in snap["device_traces"]:
            for e in tr:
                if e["action"] in ("alloc", "free_requested", "segment_alloc", "segment_free"):
                    f = frames_of(e) if e["action"] == "alloc" else []
                    evs.append({"a": e["action"], "size": e["size"], "addr": e["addr"], "f": f})
        out["cases"].append(dict(name=name, events=evs, **info))
        return res

    return record
