"""One op's allocations on the GPU, for the kernel probes (plain python3, beside them in probes/).

`case(name, make, fn)` makes the operands, then prints the allocations `fn(*operands)` made (count,
requested bytes, peak above the start), read from the caching allocator's counters, or the start of
the RuntimeError it raised. `vramscope run` of a probe prints the twin's same lines."""

import torch


def stats():
    s = torch.cuda.memory_stats()
    return s["allocation.all.allocated"], s["requested_bytes.all.allocated"]


def case(name, make, fn):
    args = make()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    c0, r0 = stats()
    try:
        out = fn(*args)
        torch.cuda.synchronize()
        c1, r1 = stats()
        print(
            f"{name} count {c1 - c0} bytes {r1 - r0} peak {torch.cuda.max_memory_allocated() - base}",
            flush=True,
        )
        del out
    except RuntimeError as e:
        print(f"{name} RAISED {str(e)[:110]}", flush=True)
    del args
