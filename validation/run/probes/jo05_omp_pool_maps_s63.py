"""Session 63 probe (blind274/jo05, torchvision swin3d_b built on the host, then `.to("cuda")`): where
OpenMP's worker pool, started during the build, put its threads' stacks and glibc arenas, and where
the CUDA context and `.to()`'s chunks then went.

jo05's H100 history (/work/gpu_s62/f/h/jo05.pickle.xz; B = the first segment + 2 MiB, the first
segment at B-2) and the twin's snapshot agree on every event, and on every placement up to the
segments made by `.to()`: the GPU's 5th segment (a 2 MiB cudaMalloc, allocation 53) goes to a chunk at
B+192 and every later chunk of `.to()` below the context (B-300 down), while the twin (rule 17:
arenas 128 MiB apart with the 64 MiB between them free, the context's arena at B+160) puts its
chunks into those gaps (B+1216, 1088, ..., 320). So on the GPU the gaps between arenas were not free,
and B+160..B+224 was. This prints the maps to see how the arenas lie (128 MiB apart as jj04's, or
packed), which thread count the pool had, and what lies above the context.

    python3 probes/jo05_omp_pool_maps_s63.py        (from validation/run; the GPU; about 10 s)

Prints: torch's thread count, the task count, then /proc/self/maps between the lowest segment - 1 GiB
and the highest tensor + 1 GiB, at (a) after the build, before CUDA, (b) right after the context's
creation (`torch.cuda.synchronize()`), (c) after `.to("cuda")`, with the allocator's segments in
creation order; offsets from B = the first segment + 2 MiB (rule 4: the first 2 MiB cudaMalloc at B-2)."""

import os

import torch
from torchvision.models.video import swin3d_b

if torch.cuda.is_available():
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)

MIB = 1 << 20
torch.manual_seed(2745)


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


model = swin3d_b(weights=None, num_classes=400)
named = {}
for n, p in list(model.named_parameters()) + list(model.named_buffers()):
    named.setdefault((p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()), n)
tensors = sorted((a, n, name) for (a, n), name in named.items())
print(
    "torch threads",
    torch.get_num_threads(),
    "tasks",
    len(os.listdir("/proc/self/task")),
    "OMP",
    os.environ.get("OMP_NUM_THREADS"),
)
big = [t for t in tensors if t[1] >= 1_000_000]
print(
    f"tensors >= 1 MB: {len(big)}, {sum(t[1] for t in big) / MIB:.2f} MiB,",
    f"span {big[0][0]:#x}..{big[-1][0] + big[-1][1]:#x}",
)
before = read_maps()
if not torch.cuda.is_available():  # a dry run on a host without a GPU: the build's maps only
    show(
        "(a) after the build (no GPU)", before, big, big[0][0] - 3072 * MIB, big[-1][0] + 256 * MIB, big[0][0]
    )
    raise SystemExit(0)
torch.cuda.synchronize()  # the context
ctx = read_maps()
model = model.to("cuda")
after = read_maps()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
segs = [(e["addr"], e["size"]) for e in trace if e["action"] == "segment_alloc"]  # creation order
print(f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
lo_bound = min(a for a, _ in segs) - 1024 * MIB
hi_bound = big[-1][0] + big[-1][1] + 1024 * MIB  # (the stacks may lie above every tensor)
base = segs[0][0] + 2 * MIB  # rule 4: the first 2 MiB cudaMalloc at B-2
show("(a) after the build, before CUDA", before, big, lo_bound, hi_bound, base)
show("(b) after the context's creation", ctx, big, lo_bound, hi_bound, base)
show("(c) after .to('cuda')", after, big, lo_bound, hi_bound, base)
print(
    "segments in creation order (offset MiB, MiB):",
    [(f"B{(a - base) / MIB:+.1f}", n // MIB) for a, n in segs],
)
