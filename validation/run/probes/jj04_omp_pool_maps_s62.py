"""Session 62 probe (blind269/jj04, V-JEPA 2 ViT-L built on the host): where OpenMP's worker pool, started
by the build's `trunc_normal_` (erfinv_/mul_/add_/clamp_ over > 32,768 elements: `VJEPA2Model`'s
`post_init`, before the classifier builds its pooler), maps its threads' stacks and glibc arenas,
and where the CUDA context's creation then goes.

The twin lays out the host-built model's tensors above the context (driver address-space rule 11) but
not a pool that started before the context (`_capture.py`: "Before the CUDA context exists their
mappings lie above it ... and are not laid out"; docs/driver-placement.md, session 41). jj04's H100
history (its anchor B, the first segment - 72 MiB, is 32 MiB mod 64 MiB) puts the `.cuda()`'s chunks at
B+192+128k for k = 8, 7, ..., 1 (allocations 10 to 202), then k = 13 and 12 (allocations 621 and 645):
the 64 MiB gaps between 64 MiB arenas at B+96+128k, as session 41 measured on the H200. In the twin,
the pool starts at the build's first `erfinv_` (the patch embedding's `trunc_normal_`) with 145 of the
168 tensors of 3.8 MB or more made: the pooler's 23 (188 MiB) come after, so on the GPU they would lie
in the pool's highest gaps and free them at the end of `.cuda()` (k = 13, 12). This probe prints the
process's maps to settle the layout (which gaps the pooler's tensors and the context's own mappings
take, where the 15 stacks lie, where B lies under the lowest arena).

    python3 jj04_omp_pool_maps_s62.py                    # as the recorded run
    OMP_NUM_THREADS=1 python3 jj04_omp_pool_maps_s62.py  # control: no pool, no holes expected

Prints: torch's thread count, the task count, then three views of /proc/self/maps between the lowest
segment - 1 GiB and the highest tensor + 64 MiB (every mapping: offset from the first segment's
address - 72 MiB (the anchor B if the first segment is at B+72), length, perms, kind
(tensor / anon / file), and gaps): (a) after the build, before CUDA; (b) right after the context's
creation (`torch.cuda.synchronize()`); (c) after `.cuda()`, with the allocator's segments."""

import os

import torch
from transformers import VJEPA2Config, VJEPA2ForVideoClassification

# as history.py did on the GPU (CONTEXT=none), right after torch's import: the trace gives the
# segments in creation order
if torch.cuda.is_available():
    torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)

MIB = 1 << 20
torch.manual_seed(2694)


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


cfg = VJEPA2Config(
    patch_size=16,
    crop_size=256,
    frames_per_clip=16,
    tubelet_size=2,
    hidden_size=1024,
    num_attention_heads=16,
    num_hidden_layers=24,
    mlp_ratio=4.0,
    drop_path_rate=0.1,
    num_pooler_layers=3,
    pred_hidden_size=384,
    pred_num_hidden_layers=12,
    pred_num_attention_heads=12,
    num_labels=174,
)
model = VJEPA2ForVideoClassification(cfg)
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
big = [t for t in tensors if t[1] >= 3_800_000]
print(
    f"tensors >= 3.8 MB: {len(big)}, {sum(t[1] for t in big) / MIB:.2f} MiB,",
    f"span {big[0][0]:#x}..{big[-1][0] + big[-1][1]:#x}",
)
before = read_maps()
if not torch.cuda.is_available():  # a dry run on a host without a GPU: the build's maps only
    show(
        "(a) after the build (no GPU)", before, big, big[0][0] - 3072 * MIB, big[-1][0] + 64 * MIB, big[0][0]
    )
    raise SystemExit(0)
torch.cuda.synchronize()  # the context
ctx = read_maps()
model = model.cuda()
trace = torch.cuda.memory._snapshot()["device_traces"][0]
segs = [(e["addr"], e["size"]) for e in trace if e["action"] == "segment_alloc"]  # creation order
print(f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
lo_bound = min(a for a, _ in segs) - 1024 * MIB
hi_bound = big[-1][0] + big[-1][1] + 64 * MIB
anchor = os.environ.get("ANCHOR")  # optional: an address to print offsets from
base = int(anchor, 16) if anchor else segs[0][0] - 72 * MIB  # rule 4: the first segment at B+72
show("(a) after the build, before CUDA", before, big, lo_bound, hi_bound, base)
show("(b) after the context's creation", ctx, big, lo_bound, hi_bound, base)
show("(c) after .cuda()", read_maps(), big, lo_bound, hi_bound, base)
print(
    "segments in creation order (offset MiB, MiB):",
    [(f"B{(a - base) / MIB:+.1f}", n // MIB) for a, n in segs],
)
