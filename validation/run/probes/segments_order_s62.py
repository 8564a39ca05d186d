"""Compare two memory histories (the GPU's, from validation/run/history.py, and the twin's, from
`vramscope run --snapshot`) up to addresses: is the allocator fed the same events, and does it make
the same choices, with segments named by their creation index rather than their address?

    python3 segments_order_s62.py GPU.pickle TWIN.pickle

1. The event order: for every allocation, the set of blocks freed since the previous one (blocks
   named by the index of the allocation that made them). Frees between two allocations commute, so
   only a different set is a difference in the program's order.
2. The placement: each allocation's (segment creation index, offset, segment size). Where the two
   agree up to allocation K, both allocators are in the same state up to the segments' addresses.
3. At the first allocation placed differently: the free gaps (between live blocks, each rounded up to
   512 bytes) of at least its size on each side, with their segment's creation index and offset
   from the first segment - 72 MiB (the context's anchor B where the first segment lies at B+72,
   driver address-space rule 4). Equal gaps are tied, and `BlockComparatorSize` (size, stream,
   address) breaks the tie by address, so the segments' addresses decide.

Session 62 (blind269/jj04): 69,906 allocations with the same frees before each; every placement the
same up to allocation 4629, whose two 8 MiB candidates (segment 98 offset 0, segment 108 offset 12 MiB)
lie in the other address order: segment 98 at B-832 on the GPU, B+288 in the twin."""

import pickle
import sys

MIB = 1 << 20


def trace(path):
    with open(path, "rb") as f:
        return pickle.load(f)["device_traces"][0]


def walk(t):
    """Per allocation: (size, frozenset of blocks freed since the previous allocation, segment
    index, offset, segment size); and the segments (address, size) in creation order."""
    segs, live, out, freed = [], {}, [], []
    for e in t:
        a = e["action"]
        if a == "segment_alloc":
            segs.append((e["addr"], e["size"]))
        elif a == "free_completed":
            freed.append(live.pop(e["addr"])[0])
        elif a == "alloc":
            k = len(out)
            where = next(
                ((i, e["addr"] - s, n) for i, (s, n) in enumerate(segs) if s <= e["addr"] < s + n), None
            )
            out.append((e["size"], frozenset(freed), *(where or (None, None, None))))
            live[e["addr"]] = (k, e["size"])
            freed = []
    return out, segs


def gaps_at(t, K, floor):
    """The free gaps of at least `floor` bytes just before allocation K: (size, segment index,
    offset, address)."""
    segs, live, k = [], {}, 0
    for e in t:
        a = e["action"]
        if a == "segment_alloc":
            segs.append((e["addr"], e["size"]))
        elif a == "free_completed":
            live.pop(e["addr"])
        elif a == "alloc":
            if k == K:
                break
            live[e["addr"]] = e["size"]
            k += 1
    out = []
    for i, (s, n) in enumerate(segs):
        cur = s
        for b in sorted(x for x in live if s <= x < s + n):
            if b - cur >= floor:
                out.append((b - cur, i, cur - s, cur))
            cur = b + -(-live[b] // 512) * 512
        if s + n - cur >= floor:
            out.append((s + n - cur, i, cur - s, cur))
    return sorted(out), segs


def main():
    tg, tt = trace(sys.argv[1]), trace(sys.argv[2])
    g, sg = walk(tg)
    w, sw = walk(tt)
    print(f"allocations: gpu {len(g)} twin {len(w)}; segments: gpu {len(sg)} twin {len(sw)}")
    order = next((k for k, (a, b) in enumerate(zip(g, w, strict=False)) if a[:2] != b[:2]), None)
    print("first allocation with another size or other frees before it:", order)
    K = next((k for k, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), None)
    print("first allocation placed differently (segment index, offset, segment size):", K)
    if K is None:
        return
    print(f"  gpu {g[K][2:]} twin {w[K][2:]}, size {g[K][0]}")
    for name, t in (("gpu", tg), ("twin", tt)):
        gaps, segs = gaps_at(t, K, g[K][0])
        base = segs[0][0] - 72 * MIB
        print(f"  {name} candidates (size, segment, offset, segment at B+MiB):")
        for size, i, off, _ in gaps[:6]:
            at = (segs[i][0] - base) / MIB
            print(f"    {size} seg {i} ({segs[i][1] // MIB} MiB) offset {off} at B{at:+.1f}")


if __name__ == "__main__":
    main()
