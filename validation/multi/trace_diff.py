"""Compare the twin's allocator trace of one rank with the GPU's, entry by entry.

    python3 validation/multi/trace_diff.py VRAMSCOPE CASE RANK TRACE_DIR [N] [--cases CASES.json]
        [--from K] [--all] [--full] [--blocks] [--late]

TRACE_DIR holds CASE.rank{RANK}.trace.json (one of fixtures/multi/traces_*.tar.xz unpacked). Runs
`vramscope estimate ... --snapshot` for the case of CASES.json (validation/multi/multi_cases.json
unless given; FSDP and DDP alike) and prints the first entry (action, size, stream) where the two
differ, with the GPU's Python frames around it. `--from K` starts the comparison at entry K of
both; `--all` prints every differing entry (one line each) instead of stopping at the first;
`--full` compares the frees' completions and the segments' allocations too. `--blocks` prints the
first allocation whose block differs in size (its remainder left unsplit in one trace and not in
the other: the caching allocator's best fit took another block), each trace's blocks rebuilt from
its own addresses; where the traces are equal in every entry (`--full`) and differ in blocks, the
segments' address order is what differs. `--late` (DDP) leaves the reducer's first bucket's free
out of both traces (its allocation in `_ddp_init_helper`, the twin's at the same entry) and compares
the allocations and frees (not the segments, which a bucket held longer moves): where they are then
equal, the bucket's lifetime (the watchdog race of fixtures/multi/README.md) is the only difference.
"""

import json
import os
import pickle
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from answers import case_args


def main():
    argv = sys.argv[1:]
    opts = {}
    for flag in ("--cases", "--from"):
        if flag in argv:
            i = argv.index(flag)
            opts[flag] = argv[i + 1]
            del argv[i : i + 2]
    every, full, blocks = ("--all" in argv), ("--full" in argv), ("--blocks" in argv)
    late = "--late" in argv
    argv = [a for a in argv if a not in ("--all", "--full", "--blocks", "--late")]
    binary, name, rank, tdir = argv[0], argv[1], int(argv[2]), argv[3]
    n = int(argv[4]) if len(argv) > 4 else 2
    here = os.path.dirname(os.path.abspath(__file__))
    path = opts.get("--cases", os.path.join(here, "multi_cases.json"))
    c = next(c for c in json.load(open(path)) if c["name"] == name)
    tmp = tempfile.mkdtemp()
    json.dump(c["config"], open(os.path.join(tmp, "config.json"), "w"))
    args = case_args(binary, c, n, "h200", os.path.join(tmp, "config.json"))
    if c["parallel"] == "fsdp":
        args += ["--fsdp-rank", str(rank)]
    args += ["--snapshot", os.path.join(tmp, "twin.pickle")]
    p = subprocess.run(args, capture_output=True, text=True)
    if not os.path.exists(os.path.join(tmp, "twin.pickle")):
        sys.exit(f"vramscope estimate failed: {p.stderr.strip()}")
    snap = pickle.load(open(os.path.join(tmp, "twin.pickle"), "rb"))
    raw_gp = json.load(open(os.path.join(tdir, f"{name}.rank{rank}.trace.json")))
    if blocks:
        raw_tw = [(e["action"], e["addr"], e["size"]) for e in snap["device_traces"][0]]
        first_block_difference(raw_tw, raw_gp)
        return
    raw_tw = [(e["action"], e["addr"], e["size"], e.get("stream", 0)) for e in snap["device_traces"][0]]
    if late:
        raw_tw, raw_gp = without_first_bucket_free(raw_tw, raw_gp)
        full = True
    kept = ("alloc", "free_requested") + (("free_completed",) if full else ())
    kept += ("segment_alloc", "segment_free") if full and not late else ()
    tw = [(e[0], e[2], e[3]) for e in raw_tw if e[0] in kept]
    gp = [e for e in raw_gp if e[0] in kept]
    print(f"twin {len(tw)} entries, GPU {len(gp)}")
    start = int(opts.get("--from", 0))
    streams = {}  # the GPU's stream ids, in the twin's numbering (by first use)
    found = False
    for i, (a, g) in enumerate(zip(tw, gp, strict=False)):
        same_stream = streams.setdefault(g[3], a[2]) == a[2]
        if i < start:
            continue
        if a[:2] != (g[0], g[2]) or not same_stream:
            if every:
                print(i, a, (g[0], g[2], g[3]), g[4][:1])
                found = True
                continue
            for j in range(max(0, i - 6), min(i + 10, len(gp))):
                print(j, tw[j] if j < len(tw) else None, (gp[j][0], gp[j][2], gp[j][3]), gp[j][4][:2])
            return
    if not found:
        print("the same actions, sizes and streams")


def block_sizes(trace):
    """(block size, rounded request, entry) per allocation of a trace ([action, addr, size, ...]
    entries), the blocks rebuilt from the addresses: an allocation takes the start of a free block
    (the gap up to the next live block of its segment) and splits off the remainder only where
    `CUDACachingAllocator.cpp`'s `shouldSplit` does (small pool: at least 512 bytes; large pool:
    more than 1 MiB)."""
    segs, out = {}, []
    for k, e in enumerate(trace):
        action, addr, size = e[0], e[1], e[2]
        if action == "segment_alloc":
            segs[addr] = (size, {})
        elif action == "segment_free":
            segs.pop(addr, None)
        elif action in ("alloc", "free_completed"):
            base = next(a for a, (n, _) in segs.items() if a <= addr < a + n)
            n, live = segs[base]
            if action == "free_completed":
                live.pop(addr, None)
                continue
            r = 512 if size < 512 else (size + 511) // 512 * 512
            rest = min([a for a in live if a > addr] + [base + n]) - addr - r
            split = rest >= 512 if r <= 1 << 20 else rest > 1 << 20
            live[addr] = r if split else r + rest
            out.append((live[addr], r, k))
    return out


def without_first_bucket_free(tw, gp):
    """Both traces without the free (request and completion) of DDP's first bucket: the GPU's last
    allocation made in `_ddp_init_helper`, and the twin's allocation at the same entry."""
    ks = [k for k, e in enumerate(gp) if e[0] == "alloc" and e[4][:1] and "_ddp_init_helper" in e[4][0]]
    if not ks:
        sys.exit("--late: no allocation in _ddp_init_helper in the GPU's trace (not DDP?)")
    k = ks[-1]
    if k >= len(tw) or tw[k][0] != "alloc" or tw[k][2] != gp[k][2]:
        sys.exit(f"--late: the traces differ before the first bucket (GPU entry {k})")

    def drop(t):
        frees = [
            j
            for j in range(k + 1, len(t))
            if t[j][1] == t[k][1] and t[j][0] in ("free_requested", "free_completed")
        ][:2]
        return [e for j, e in enumerate(t) if j not in frees], frees

    (tw2, ft), (gp2, fg) = drop(tw), drop(gp)
    print(
        f"first bucket ({gp[k][2]} bytes, entry {k}): the twin frees it at entries {ft}, "
        f"the GPU at {fg or 'none (held to the end)'}"
    )
    return tw2, gp2


def first_block_difference(tw, gp):
    bt, bg = block_sizes(tw), block_sizes(gp)
    for i, (a, b) in enumerate(zip(bt, bg, strict=False)):
        if a[0] != b[0]:
            print(
                f"allocation {i} ({a[1]} bytes): the twin's block {a[0]}, the GPU's {b[0]};"
                f" GPU entry {b[2]}, frames {gp[b[2]][4][:2]}"
            )
            return
    print(f"the same blocks in all {min(len(bt), len(bg))} allocations")


if __name__ == "__main__":
    main()
