"""The measuring harness the sweeps here share: one op's allocations from the memory history, and the
requested bytes beyond its outputs. Imported by the sweep scripts, which run from this folder."""

import json

import torch


def requested():
    return torch.cuda.memory_stats()["requested_bytes.all.allocated"]


def case(name, args, op, frees=False):
    """Run `op(*args)` and print one JSON line: its allocations in order (`sizes`, as the memory
    history lists them), with `frees` the sizes it freed in order, and `extra_requested`."""
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    before = requested()
    out = op(*args)
    after = requested()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(None)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    out_bytes = sum(t.untyped_storage().nbytes() for t in outs if isinstance(t, torch.Tensor) and t.is_cuda)
    trace = snap["device_traces"][0]
    line = {
        "case": name,
        "sizes": [e["size"] for e in trace if e["action"] == "alloc"],
        "extra_requested": after - before - out_bytes,
    }
    if frees:
        line["frees"] = [e["size"] for e in trace if e["action"] in ("free_requested", "free")]
    print(json.dumps(line, sort_keys=True), flush=True)
    del out, outs, args
