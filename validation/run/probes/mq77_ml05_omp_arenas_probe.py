"""Session 77 probe (blind347/ml05: MoCo v2's two torchvision resnet50 built on the host, the key encoder's
weights copied from the query's with `param_k.data.copy_(param_q.data)`): which of OpenMP's worker arenas
lie packed (64 MiB apart, glibc's `aligned_heap_area` hint taken) and which 128 MiB apart, loop by loop, and
which CPU weights glibc maps on its own. No GPU needed; run it on the GPU host (its 16 threads: the race
between the workers depends on them).

ml05's H100 history (fixtures/run/history_ml05_s77_h100.pickle.xz) against the twin: the twin's reserved
is 2 MiB over the H100's from phase 1 on, because two equal small-pool free blocks tie and the GPU's lies
lower (`block_diff.py --cross`: the count follows the segments' addresses, not the requests). The
addresses come from rule 17 (docs/driver-placement.md): the `.to()` copies' 20 MiB chunks take the 64 MiB
gaps between the arenas. The twin's layout (all 15 arenas 128 MiB apart, blind269/jj04's maps) leaves 12
gaps and every `.to()` chunk above the context; the H100 put the 8th and 9th below it, as the twin does with
5 or more arenas packed (`VRAMSCOPE_ARENAS_PACKED=5` to 15: every figure exact, 0 to 4: +2 MiB). The copy
loops start the workers 1, then 3, then 11 at a time (36,864, 147,456 and 589,824 elements in the twin's
32,768-element grains), so this probe prints after each `copy_` that adds or removes a mapping of 1 MiB or
more: is a loop's group packed or apart? And the H100's chunk at allocation 312 (B+1952, in the freed
tensors' range) needs the 2 and 2.25 MiB weights mapped, which the twin's threshold (3,846,144) vetoes:
the `mapped` lines say which sizes this process's glibc mapped.

    python3 probes/mq77_ml05_omp_arenas_probe.py [N]    (from validation/run; N fresh processes, 5 by
                                                         default, about 10 s each; CPU only)
    PROBE_THREADS=16 python3 probes/mq77_ml05_omp_arenas_probe.py 1   (a dry run on a smaller host)

Prints, for each process: the threads; each `copy_` (parameter index, elements) with the anonymous mappings
of 1 MiB or more it added or removed (offsets in MiB from the lowest 8 MiB stack at the end); then the
arenas (64 MiB heaps) with the spacing between them, highest first; then, by size, how many of the CPU
parameters and buffers of 1 MiB or more glibc mapped on their own (its chunk header's IS_MMAPPED bit)."""

import collections
import ctypes
import itertools
import os
import subprocess
import sys

MIB = 1 << 20


def read_maps():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


def anon(maps):
    return {
        (lo, hi, perm) for lo, hi, perm, name in maps if hi - lo >= MIB and (not name or name.startswith("["))
    }


def glibc_mapped(ptr: int, nbytes: int) -> bool:
    """Whether glibc served the allocation at `ptr` with a mapping of its own (malloc/malloc.c: the size
    word's IS_MMAPPED bit, `_int_memalign`'s offset in prev_size)."""
    if ptr % 4096 < 16:
        return False
    size = ctypes.c_size_t.from_address(ptr - 8).value
    prev = ctypes.c_size_t.from_address(ptr - 16).value
    length = (size & ~7) + prev
    return bool(size & 2) and length % 4096 == 0 and nbytes < length <= nbytes + MIB


def one():
    import torch
    import torch.nn as nn
    import torchvision.models as models

    if os.environ.get("PROBE_THREADS"):
        torch.set_num_threads(int(os.environ["PROBE_THREADS"]))
    torch.manual_seed(0)
    # ml05's MoCo.__init__ up to the copy (dim 128, the MLP head)
    encoder_q = models.resnet50(num_classes=128)
    encoder_k = models.resnet50(num_classes=128)
    dim_mlp = encoder_q.fc.weight.shape[1]
    encoder_q.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), encoder_q.fc)
    encoder_k.fc = nn.Sequential(nn.Linear(dim_mlp, dim_mlp), nn.ReLU(), encoder_k.fc)
    steps = []
    prev = read_maps()
    for k, (param_q, param_k) in enumerate(zip(encoder_q.parameters(), encoder_k.parameters(), strict=True)):
        param_k.data.copy_(param_q.data)
        param_k.requires_grad = False
        now = read_maps()
        if anon(now) != anon(prev):
            steps.append((k, param_q.numel(), prev, now))
        prev = now
    queue = nn.functional.normalize(torch.randn(128, 65536), dim=0)
    after = read_maps()
    tasks = len(os.listdir("/proc/self/task"))
    print(f"== torch threads {torch.get_num_threads()}, tasks {tasks}")
    stacks = [lo for lo, hi, perm, name in after if perm == "rw-p" and not name and hi - lo == 8 * MIB]
    base = min(stacks) if stacks else min(lo for lo, _, _, _ in after)
    print(f"   offsets from the lowest 8 MiB stack ({len(stacks)} stacks)")
    for k, numel, before, now in steps:
        print(f"   copy_ of parameter {k} ({numel} elements):")
        for lo, hi, perm in sorted(anon(now) - anon(before)):
            print(f"      + S{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:8.3f} {perm}")
        for lo, hi, perm in sorted(anon(before) - anon(now)):
            print(f"      - S{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:8.3f} {perm}")
    # a glibc arena: 64 MiB aligned, its first pages rw-p, the rest ---p
    heaps = sorted(
        (lo for lo, hi, perm, name in after if not name and lo % (64 * MIB) == 0 and perm == "rw-p"),
        reverse=True,
    )
    heaps = [lo for lo in heaps if any(h == lo + 64 * MIB for _, h, p, _ in after if p == "---p")]
    print(f"   arenas (64 MiB heaps), highest first, at S{[round((h - base) / MIB, 2) for h in heaps]}")
    print(f"   spacing {[round((a - b) / MIB) for a, b in itertools.pairwise(heaps)]}")
    mapped, heap = collections.Counter(), collections.Counter()
    tensors = [
        *encoder_q.parameters(),
        *encoder_k.parameters(),
        *encoder_q.buffers(),
        *encoder_k.buffers(),
        queue,
    ]
    for t in tensors:
        nbytes = t.untyped_storage().nbytes()
        if nbytes >= MIB:
            (mapped if glibc_mapped(t.data_ptr(), nbytes) else heap)[nbytes] += 1
    for nbytes in sorted(set(mapped) | set(heap)):
        print(f"   mapped {nbytes:>10}: {mapped[nbytes]} mapped, {heap[nbytes]} in the heap")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "one":
        one()
    else:
        # several fresh processes: which worker takes glibc's hint is a race
        for k in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
            print(f"-- process {k}", flush=True)
            subprocess.run([sys.executable, __file__, "one"], check=False)
            sys.stdout.flush()
