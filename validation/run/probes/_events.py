"""One call's allocator events on the GPU, for the workspace probes (plain python3, beside them in probes/).

`events(tag, fn)` runs `fn()` with the memory history on and prints the caching allocator's alloc and
free_requested sizes inside it, in order, and the call's peak above what was allocated before it
(`torch.cuda.memory._snapshot()`'s device trace). `vramscope run` of a probe prints the twin's lines."""

import torch


def events(tag, fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            ev.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            ev.append(f"-{e['size']}")
    print(f"{tag}: peak_above {torch.cuda.max_memory_allocated() - base} events {' '.join(ev)}")
    return out
