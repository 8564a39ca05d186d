"""Session 67 probe: how OpenMP's worker arenas lie after a model's build on the host, for three builds
(docs/driver-placement.md, rule 17; no GPU needed).

Rule 17 (session 62, blind269/jj04's H100 maps) has the 15 workers enter glibc's `new_heap` together, so
each 128 MiB mapping lies below the last arena and the 64 MiB arenas lie 128 MiB apart with 64 MiB free
between them, which `.to()`'s first chunks then take. A worker that enters `new_heap` after another's
128 MiB mapping came aligned takes glibc's hint instead (`aligned_heap_area`, malloc/arena.c): the 64 MiB
that mapping gave back, so the two lie packed. blind290/ke05's maps probe on the H100
(`nb67_ke05_host_maps_probe.py`, session 67) found convnext_base's 15 arenas 9 packed and 6 128 MiB
apart (by the build's loops of 2, 4, 8 and 16 tasks: the workers of the first three loops and 2 of the
last's, inferred; the `trunc_normal_` trace below measures it), and ke05's processes differ: its H200
history's segments fit all 15 packed, its session-67 H100 history's and the probe's two processes' do
not, and the H100 record and that history printed other phase figures. On
this 2-core machine (16 threads) all three builds pack all 15.

    python3 probes/nb67_omp_arenas_build_probe.py [N]    (from validation/run; N rounds, 3 by default,
                                                          about 30 s a round; CPU only)

Prints, for each build in each round (a fresh process each: torchvision convnext_base as ke05,
torchvision swin3d_b as blind274/jo05, transformers VJEPA2 as jj04): the threads, then after each
`torch.nn.init.trunc_normal_` that added or removed an anonymous mapping of 1 MiB or more, those mappings
(offsets in MiB from the lowest 8 MiB stack at the end), then the arenas (64 MiB heaps) with the spacing
between them: how often each build packs, and which workers."""

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


def build(kind):
    import torch

    if os.environ.get("PROBE_THREADS"):  # (a dry run on a smaller host: the GPU host's 16 threads)
        torch.set_num_threads(int(os.environ["PROBE_THREADS"]))
    steps = []
    original = torch.nn.init.trunc_normal_

    def traced(tensor, *args, **kwargs):
        out = original(tensor, *args, **kwargs)
        steps.append((tensor.numel(), read_maps()))
        return out

    torch.nn.init.trunc_normal_ = traced
    before = read_maps()
    if kind == "convnext_base":
        from torchvision.models import convnext_base

        torch.manual_seed(2905)
        model = convnext_base(weights=None)
    elif kind == "swin3d_b":
        from torchvision.models.video import swin3d_b

        torch.manual_seed(2745)
        model = swin3d_b(weights=None, num_classes=400)
    else:
        from transformers import VJEPA2Config, VJEPA2ForVideoClassification

        torch.manual_seed(2694)
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
    torch.nn.init.trunc_normal_ = original
    after = read_maps()
    n = sum(p.numel() for p in model.parameters())
    tasks = len(os.listdir("/proc/self/task"))
    print(f"== {kind}: {n} parameters, torch threads {torch.get_num_threads()}, tasks {tasks}")
    stacks = [lo for lo, hi, perm, name in after if perm == "rw-p" and not name and hi - lo == 8 * MIB]
    base = min(stacks) if stacks else min(lo for lo, _, _, _ in after)
    print(f"   offsets from the lowest 8 MiB stack ({len(stacks)} stacks)")

    def anon(maps):
        return {
            (lo, hi, perm)
            for lo, hi, perm, name in maps
            if hi - lo >= MIB and (not name or name.startswith("["))
        }

    prev = anon(before)
    for k, (numel, maps) in enumerate(steps):
        now = anon(maps)
        new, gone = sorted(now - prev), sorted(prev - now)
        if new or gone:
            print(f"   trunc_normal_ {k} of {numel} elements:")
            for lo, hi, perm in new:
                print(f"      + S{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:8.3f} {perm}")
            for lo, hi, perm in gone:
                print(f"      - S{(lo - base) / MIB:+10.2f} len {(hi - lo) / MIB:8.3f} {perm}")
        prev = now
    # a glibc arena: 64 MiB aligned, its first pages rw-p, the rest ---p
    heaps = sorted(lo for lo, hi, perm, name in after if not name and lo % (64 * MIB) == 0 and perm == "rw-p")
    heaps = [lo for lo in heaps if any(h == lo + 64 * MIB for _, h, p, _ in after if p == "---p")]
    print(f"   arenas (64 MiB heaps) at S{[round((h - base) / MIB, 2) for h in heaps]}")
    print(f"   spacing {[round((b - a) / MIB) for a, b in itertools.pairwise(heaps)]}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].isdigit():
        build(sys.argv[1])
    else:
        # each build in several fresh processes: which worker takes glibc's hint is a race
        for k in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
            for kind in ("convnext_base", "swin3d_b", "vjepa2"):
                print(f"-- process {k}", flush=True)
                subprocess.run([sys.executable, __file__, kind], check=False)
                sys.stdout.flush()
