"""Excerpt of blind341/md05's H100 maps (`validation/va_run_maps.py`, MAX_OPS=4000): where the context that
the first `pin_memory` creates lies against the host-built tensors, the pinned blocks and the first segments.

    python3 validation/run/probes/nd76_md05_pin_context_maps.py MD05.maps.json MD05.trace.json

Prints, in MiB from B (the top of the context's 416 MiB reservation): the mappings of 1 MiB or more that the
first `_pin_memory` op adds and removes, the lowest host (rw-p) mapping just before it, the maps of 1 MiB
or more at the last stop read (op 4,000, still pinning), and the first 30 segments of the memory history.
"""

import json
import sys

M = 1 << 20


def main():
    maps = json.load(open(sys.argv[1]))
    trace = json.load(open(sys.argv[2]))
    cur = {tuple(x) for x in maps["first"]}
    stops = maps["stops"]
    first = next(i for i, s in enumerate(stops) if s[1] == "aten._pin_memory.default")
    for s in stops[:first]:
        cur -= {tuple(a) for a in s[4]}
        cur |= {tuple(a) for a in s[3]}
    k, _, _, add, rem = stops[first]
    ctx = [a for a in add if a[2] == "---p" and a[1] - a[0] == 416 * M]
    base = ctx[0][1]
    lo = min(a[0] for a in cur if a[2] == "rw-p" and a[1] - a[0] >= 64 * M and a[0] > base)
    print(f"B = {base:#x}; first _pin_memory at op {k}")
    print(f"lowest host tensor mapping (>= 64 MiB) before it: B{(lo - base) / M:+.2f}")
    for sign, lst in (("+", add), ("-", rem)):
        for a in sorted(lst):
            if a[1] - a[0] < M:
                continue
            at = f"B{(a[0] - base) / M:+9.2f}" if abs(a[0] - base) < 8192 * M else f"{a[0]:#x}"
            print(f"  {sign} {at} {(a[1] - a[0]) / M:8.2f} {a[2]} {a[3]}")
    for s in stops[first:]:
        cur -= {tuple(a) for a in s[4]}
        cur |= {tuple(a) for a in s[3]}
    print(f"maps at the last stop read (op {stops[-1][0]}), 1 MiB or more, B-800..B+4100:")
    for a in sorted(cur):
        if a[1] - a[0] >= M and base - 800 * M <= a[0] <= base + 4100 * M:
            print(f"  B{(a[0] - base) / M:+9.2f} {(a[1] - a[0]) / M:8.2f} {a[2]} {a[3]}")
    print("first 30 segments (memory history):")
    segs = [e for e in trace if e[0] == "segment_alloc"][:30]
    for e in segs:
        print(f"  B{(e[1] - base) / M:+9.2f} {e[2] / M:6.2f}")


if __name__ == "__main__":
    main()
