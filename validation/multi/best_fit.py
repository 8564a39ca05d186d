"""Check that a recorded allocator trace is the caching allocator's best fit over its own addresses.

    python3 validation/multi/best_fit.py TRACE.json [...]

Each TRACE.json is one of multi_cases.py's traces ([action, addr, size, stream, frames] per entry;
fixtures/multi/traces_*.tar.xz unpacked). Replays the blocks from the addresses and prints every
allocation that did not take the smallest, then lowest, free block of its stream and pool
(`BlockComparatorSize` in CUDACachingAllocator.cpp), and every new segment made while a free block
fitted. None in a trace means its placement follows from its segments' addresses alone.
"""

import json
import sys


def rnd(s):
    return 512 if s < 512 else (s + 511) // 512 * 512


def check(t, label, show=5):
    segs = {}  # address -> [size, stream, small pool, {block address: [size, allocated]}]
    bad = 0
    for k, e in enumerate(t):
        a, addr, size, stream = e[0], e[1], e[2], e[3]
        if a == "segment_alloc":
            nx = next(x for x in t[k + 1 :] if x[0] == "alloc")
            r = rnd(nx[2])
            small = r <= 1 << 20
            fits = [
                (bs, ba)
                for (_, st, sm, bl) in segs.values()
                if st == nx[3] and sm == small
                for ba, (bs, used) in bl.items()
                if not used and bs >= r
            ]
            if fits:
                bad += 1
                if bad <= show:
                    print(label, "entry", k, "a new segment while a free block fits", sorted(fits)[0])
            # a 2 MiB segment is the small pool's (kSmallBuffer); larger requests never get one
            segs[addr] = [size, stream, size == 2 << 20, {addr: [size, False]}]
        elif a == "segment_free":
            segs.pop(addr)
        elif a == "alloc":
            r = rnd(size)
            small = r <= 1 << 20
            best = min(
                (
                    (bs, ba)
                    for (_, st, sm, bl) in segs.values()
                    if st == stream and sm == small
                    for ba, (bs, used) in bl.items()
                    if not used and bs >= r
                ),
                default=None,
            )
            base = next(s for s in segs if s <= addr < s + segs[s][0])
            bl = segs[base][3]
            if addr not in bl or bl[addr][1]:
                print(label, "entry", k, "an allocation inside a live block")
                return 1
            if best is not None and best[1] != addr:
                bad += 1
                if bad <= show:
                    print(label, "entry", k, "took", (bl[addr][0], addr), "where best fit is", best)
            bs = bl[addr][0]
            rest = bs - r
            if (rest >= 512) if small else (rest > 1 << 20):
                bl[addr] = [r, True]
                bl[addr + r] = [rest, False]
            else:
                bl[addr][1] = True
        elif a == "free_completed":
            base = next(s for s in segs if s <= addr < s + segs[s][0])
            bl = segs[base][3]
            bl[addr][1] = False
            keys = sorted(bl)
            i = keys.index(addr)
            if i + 1 < len(keys) and not bl[keys[i + 1]][1]:
                bl[addr][0] += bl.pop(keys[i + 1])[0]
            if i > 0 and not bl[keys[i - 1]][1]:
                bl[keys[i - 1]][0] += bl.pop(addr)[0]
    print(f"{label}: {bad} allocations or segments not best fit")
    return bad


if __name__ == "__main__":
    sys.exit(1 if sum(check(json.load(open(f)), f.split("/")[-1]) for f in sys.argv[1:]) else 0)
