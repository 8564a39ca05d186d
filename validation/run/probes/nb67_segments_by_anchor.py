"""Two memory histories' segments side by side, as offsets from each process's anchor, and the chunk holes
a GPU history's segments skipped (session 67, blind290/ke05).

    python3 nb67_segments_by_anchor.py GPU.pickle TWIN.pickle [N] [--gpu-first MIB] [--twin-first MIB]
    python3 nb67_segments_by_anchor.py --holes HISTORY.pickle[.xz]

The first form prints the first N segments (made and freed, in order) of each history with their size and
offset in MiB from the anchor B (docs/driver-placement.md, rule 4), B being the first segment's address
plus 2 MiB (the first segment at B-2: a first allocation of 2 MiB or less) unless `--gpu-first` /
`--twin-first` give the first segment's offset from B (72 for a first allocation that takes the context's
B+72 hole), and marks the segments that lie elsewhere from B. Offsets from B, not from the first segment:
`segments_order_s62.py` names segments by creation index and so cannot tell a first segment placed
elsewhere (ke05's GPU and twin put segments 1 to 22 6 MiB apart only because the GPU's lie under the
driver pool's top 8 MiB, rule 14) from a whole layout moved.

`--holes` (B: the first segment + 2 MiB) replays one history's segments through rule 2 alone (each
chunk inferred from its first segment: a 32 MiB multiple at that address) and lists each segment that
did not go where rule 2 would put it, the newest chunk's hole that fits: a hole skipped on the GPU holds
a mapping the trace does not show. The context's range (rule 6) is not inferred, so its segments' lines
are noise. ke05: segment 28's 24 MiB hole at B-2360 and segment 23's 30 MiB one at B+1634, skipped by
every later 22 and 28 MiB segment."""

import lzma
import pickle
import sys

MIB = 1 << 20


def load(path):
    with (lzma.open if str(path).endswith(".xz") else open)(path, "rb") as f:
        return pickle.load(f)["device_traces"][0]


def segments(trace):
    """(made or freed, address, size, allocations so far) of each segment event, in order."""
    out, allocs = [], 0
    for e in trace:
        if e["action"] == "alloc":
            allocs += 1
        elif e["action"] in ("segment_alloc", "segment_free"):
            out.append(("made" if e["action"] == "segment_alloc" else "freed", e["addr"], e["size"], allocs))
    return out


def side_by_side(gpu, twin, n, gpu_first, twin_first):
    g, t = segments(load(gpu)), segments(load(twin))
    bg, bt = g[0][1] - gpu_first * MIB, t[0][1] - twin_first * MIB
    for k in range(min(n, max(len(g), len(t)))):
        cells = []
        for seg, b in ((g, bg), (t, bt)):
            if k < len(seg):
                what, a, size, allocs = seg[k]
                cells.append(
                    f"{what:5s} {size / MIB:8.2f} MiB at B{(a - b) / MIB:+9.2f} (allocation {allocs})"
                )
            else:
                cells.append("-")
        same = (
            k < len(g)
            and k < len(t)
            and g[k][0] == t[k][0]
            and g[k][2] == t[k][2]
            and g[k][1] - bg == t[k][1] - bt
        )
        print(f"{k:4d} GPU {cells[0]:48s} | twin {cells[1]}{'' if same else '  <<'}")


def holes(path):
    segs = segments(load(path))
    base = segs[0][1] + 2 * MIB
    chunks = []  # [lo, hi, {address: size in 2 MiB pages}], oldest first

    def free_of(c):
        out, at = [], c[0]
        for a in sorted(c[2]):
            if a > at:
                out.append((at, a - at))
            at = max(at, a + c[2][a])
        if c[1] > at:
            out.append((at, c[1] - at))
        return out

    for k, (what, a, size, allocs) in enumerate(segs):
        pages = -(-size // (2 * MIB)) * 2 * MIB
        if what == "freed":
            for c in chunks:
                c[2].pop(a, None)
            continue
        fits = None
        for c in reversed(chunks):  # rule 2: the newest chunk with a hole that fits, best fit in it
            inside = [h for h in free_of(c) if h[1] >= pages]
            if inside:
                fits = min(inside, key=lambda h: (h[1], h[0]))
                break
        home = next((c for c in chunks if c[0] <= a < c[1]), None)
        if home is not None:
            home[2][a] = pages
        else:
            # (the first segment lies in the context's own range, rule 4: no chunk of its own)
            span = pages if k == 0 else -(-pages // (32 * MIB)) * 32 * MIB
            chunks.append([a, a + span, {a: pages}])
        if fits is not None and fits[0] != a:
            where = "a hole" if home is not None else "a new chunk"
            print(
                f"segment {k} (allocation {allocs}, {size / MIB:.2f} MiB) in {where} at "
                f"B{(a - base) / MIB:+.0f}; rule 2: the hole of {fits[1] / MIB:.0f} MiB at "
                f"B{(fits[0] - base) / MIB:+.0f}"
            )


def main():
    args = sys.argv[1:]
    if args[0] == "--holes":
        holes(args[1])
        return
    opts = {"--gpu-first": -2.0, "--twin-first": -2.0}
    rest = []
    while args:
        a = args.pop(0)
        if a in opts:
            opts[a] = float(args.pop(0))
        else:
            rest.append(a)
    side_by_side(
        rest[0], rest[1], int(rest[2]) if len(rest) > 2 else 120, opts["--gpu-first"], opts["--twin-first"]
    )


if __name__ == "__main__":
    main()
