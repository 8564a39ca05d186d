"""Session 63 probe: where a host-built model's CPU tensors, OpenMP's threads (if any) and the CUDA context
lie, and where `.to(dev)`'s chunks go (driver address-space rules 11 and 17, docs/driver-placement.md).

    python3 probes/host_built_maps_s63.py SCRIPT     (from validation/run; the GPU; seconds)

SCRIPT's source runs (as `__main__`'s globals, `dev = "cuda"`) up to its first line of the form
`NAME = EXPR.to(dev)`; EXPR is then built on the host, and the probe prints /proc/self/maps between the
lowest segment - 1 GiB and the highest tensor + 1 GiB at (a) after the build, before CUDA, (b) right after
the context's creation (`torch.cuda.synchronize()`), (c) after `NAME = NAME.to(dev)`, then the allocator's
segments in creation order. Offsets are from B = the first segment + 2 MiB (rule 4: a fresh process's
first 2 MiB cudaMalloc lies at B-2; where the first segment is larger, it lies below the context and
B is printed relative to it: read the context's 512 MiB range off (b)). Tensors of 128 KiB or more are
named (the first parameter or buffer in each mapping).

Session 63 (helper jp): blind275/jp01's H100 slack printout (/work/gpu_s62/f/slack_jp01.out) has its
phase-0 large segments in the address order [94, 20 x 3, 94, 20 x 7] MiB; the twin gives
[94, 20 x 5, 94, 20 x 5] at every offset of its lowest host tensor from B+230 to B+302 MiB (rule 11's
draw, `VRAMSCOPE_HOST_ABOVE`), so on the GPU more of `.to()`'s 20 MiB chunks went into the freed
tensors' ranges above the context than rule 11's contiguous layout allows. These maps show that layout."""

import ctypes
import os
import re
import sys

import torch

if torch.cuda.is_available():
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)

MIB = 1 << 20


def read_maps():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


def show(tag, maps, tensors, lo_bound, hi_bound, base):
    print(f"== {tag}: base {base:#x}")
    prev = None
    for lo, hi, perm, name in maps:
        if hi < lo_bound or lo > hi_bound:
            continue
        kind = "file" if name.startswith("/") else (name or "anon")
        inside = [t for a, n, t in tensors if a < hi and a + n > lo]
        if inside:
            kind = f"tensor {inside[0]}" + (f" (+{len(inside) - 1})" if len(inside) > 1 else "")
        gap = (lo - prev) / MIB if prev is not None else 0.0
        print(f"  B{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:9.3f} gap {gap:9.3f} {perm} {kind}")
        prev = hi


def glibc_mapped(ptr, nbytes):
    """Whether glibc served the allocation at `ptr` with a mapping of its own (the chunk header's
    IS_MMAPPED bit; `_glibc_mapping` in python/vramscope/_capture.py)."""
    if ptr % 4096 < 16:
        return False
    size, prev = ctypes.c_size_t.from_address(ptr - 8).value, ctypes.c_size_t.from_address(ptr - 16).value
    length = (size & ~7) + prev
    return bool(size & 2) and length % 4096 == 0 and nbytes < length <= nbytes + (1 << 20)


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    lines = open(script).read().splitlines(keepends=True)
    k, m = next(
        (i, m)
        for i, ln in enumerate(lines)
        if (m := re.match(r"^(\w+) = (.*)\.to\(dev\)\s*$", ln)) is not None
    )
    g = {"__name__": "__main__", "__file__": script}
    exec(compile("".join(lines[:k]), script, "exec"), g)
    name = m.group(1)
    model = eval(m.group(2), g)
    named = {}
    for n, p in list(model.named_parameters()) + list(model.named_buffers()):
        named.setdefault((p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()), n)
    tensors = sorted((a, n, nm) for (a, n), nm in named.items())
    print(
        f"{script}: line {k + 1}: {name}",
        "torch threads",
        torch.get_num_threads(),
        "tasks",
        len(os.listdir("/proc/self/task")),
    )
    big = [t for t in tensors if t[1] >= 128 << 10]
    print(f"tensors >= 128 KiB: {len(big)}, {sum(t[1] for t in big) / MIB:.2f} MiB")
    # which sizes glibc mapped on their own (its dynamic threshold after this program's imports:
    # the twin starts at 3,846,144 bytes, rule 7; session 42's H200 'torch' case mapped 2 MiB, not 1)
    sizes = {}
    for a, n, _ in big:
        m, t = sizes.get(n, (0, 0))
        sizes[n] = (m + glibc_mapped(a, n), t + 1)
    print(
        "glibc-mapped by size (bytes: mapped/total):", {n: f"{m}/{t}" for n, (m, t) in sorted(sizes.items())}
    )
    print(
        "imported:",
        sorted(
            k for k in ("numpy", "torchvision", "timm", "transformers", "torch._dynamo") if k in sys.modules
        ),
    )
    before = read_maps()
    if not torch.cuda.is_available():  # a dry run on a host without a GPU: the build's maps only
        lo = min(a for a, _, _ in big if a > 0x7000_0000_0000)  # (mmapped, not the brk heap)
        show("(a) after the build (no GPU)", before, big, lo - 1024 * MIB, big[-1][0] + 1024 * MIB, lo)
        return
    torch.cuda.synchronize()  # the context
    ctx = read_maps()
    model = model.to(g["dev"])
    after = read_maps()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    segs = [(e["addr"], e["size"]) for e in trace if e["action"] == "segment_alloc"]  # creation order
    print(f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    top = max((a + n for a, n, _ in big if a > segs[0][0]), default=segs[0][0])
    lo_bound, hi_bound = min(a for a, _ in segs) - 1024 * MIB, top + 1024 * MIB
    base = segs[0][0] + 2 * MIB
    show("(a) after the build, before CUDA", before, big, lo_bound, hi_bound, base)
    show("(b) after the context's creation", ctx, big, lo_bound, hi_bound, base)
    show("(c) after .to(dev)", after, big, lo_bound, hi_bound, base)
    print(
        "segments in creation order (offset MiB, MiB):",
        [(f"B{(a - base) / MIB:+.1f}", n // MIB) for a, n in segs],
    )


if __name__ == "__main__":
    main()
