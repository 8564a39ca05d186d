"""Do a twin snapshot's figures hang on where its segments lie? Replays the allocations with segments moved.

    python segment_moves.py SNAPSHOT.pickle BOUNDS [--target D,...] [--target-reserved D,...]
                            [--swap LO HI] [--random N]

SNAPSHOT is a memory history (`vramscope run --snapshot`, or a GPU's `_dump_snapshot`), BOUNDS the
trace entries that end each phase but the last (comma separated: `200,38000,41559` for four phases).
The trace's requests are replayed through the caching allocator's rules as block_diff.py rebuilds
them (CUDACachingAllocator.cpp, one stream, no expandable segments, no max_split_size): each request
rounded (`round_size`), the smallest free block of its pool that fits taken, the lowest address of
equal ones (`BlockComparatorSize`), the rest split off when `should_split` (512 bytes or more in the
small pool, more than 1 MiB in the large one), a freed block merged with free neighbours of its
segment, and a new segment (`get_allocation_size`: 2 MiB for requests of at most 1 MiB, 20 MiB below
10 MiB, else rounded up to 2 MiB) wherever no free block fits. New segments take the trace's own
addresses in the order they were made; the replay first checks that those give the trace's figures.

Then every segment is moved alone to the lowest and to the highest address (`--swap LO HI`: every
pair of segments LO..HI, numbered from 0 in the order they were made, trades addresses instead;
`--random N`: N random orders of all segments), and each move that changes a phase's peak allocated
or peak reserved is printed with the change (moved minus the trace's, per phase). `--target` marks
the moves whose peak-allocated changes are exactly the GPU-minus-twin figures of a record, and
whose peak-reserved changes are `--target-reserved`'s (unchanged where not given). Where one move
gives the GPU's figures, the twin's requests can give them too: the difference may be where the
driver put a segment (docs/driver-placement.md), and a GPU history (`block_diff.py --place`,
`--cross`) shows whether it is. Session 82 (helper oi): blind356/mu04's phase 2
and 3 peaks, blind356/mu05's small-pool segment.
"""

import bisect
import random
import sys

from block_diff import load_trace, round_size, segment_size

MIB = 1 << 20


class Block:
    __slots__ = ("addr", "free", "next", "prev", "size", "small")

    def __init__(self, addr, size, small, prev=None, nxt=None):
        self.addr, self.size, self.free, self.small, self.prev, self.next = addr, size, True, small, prev, nxt


def requests(trace):
    """(entry, 'a' or 'f', address, rounded size) and the segments as (entry, address, size)."""
    out, segs = [], []
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "alloc":
            out.append((i, "a", e["addr"], round_size(e["size"])))
        elif action == "free_completed":
            out.append((i, "f", e["addr"], 0))
        elif action == "segment_alloc":
            segs.append((i, e["addr"], e["size"]))
    return out, segs


def replay(reqs, address, bounds):
    """Per phase (peak allocated, peak reserved), the k-th new segment at address(k)."""
    pools = {True: [], False: []}  # (size, addr, block), sorted
    live = {}
    allocated = reserved = peak = peak_res = made = 0
    phases, b = [], 0
    for i, act, addr, size in reqs:
        while b < len(bounds) and i >= bounds[b]:
            phases.append((peak, peak_res))
            peak, peak_res, b = allocated, reserved, b + 1
        if act == "a":
            small = size <= MIB
            free = pools[small]
            j = bisect.bisect_left(free, (size, -1))
            if j == len(free):
                seg = segment_size(size)
                base = address(made)
                made += 1
                reserved += seg
                peak_res = max(peak_res, reserved)
                free.insert(bisect.bisect_left(free, (seg, base)), (seg, base, Block(base, seg, small)))
                j = bisect.bisect_left(free, (size, -1))
            _, at, block = free.pop(j)
            rest = block.size - size
            if rest >= 512 if small else rest > MIB:
                r = Block(at + size, rest, small, block, block.next)
                if block.next:
                    block.next.prev = r
                block.next, block.size = r, size
                free.insert(bisect.bisect_left(free, (rest, r.addr)), (rest, r.addr, r))
            block.free = False
            live[addr] = block
            allocated += block.size
            peak = max(peak, allocated)
        else:
            block = live.pop(addr, None)
            if block is None:
                continue
            allocated -= block.size
            block.free = True
            free = pools[block.small]
            for other in (block.next, block.prev):
                if other is not None and other.free:
                    free.pop(bisect.bisect_left(free, (other.size, other.addr)))
                    lo, hi = (block, other) if other is block.next else (other, block)
                    lo.size += hi.size
                    lo.next = hi.next
                    if hi.next:
                        hi.next.prev = lo
                    block = lo
            free.insert(bisect.bisect_left(free, (block.size, block.addr)), (block.size, block.addr, block))
    phases.append((peak, peak_res))
    return phases


def main():
    args = sys.argv[1:]
    trace = load_trace(args[0])
    bounds = [int(x) for x in args[1].split(",")]
    target = target_res = swap = None
    n_random = 0
    if "--target" in args:
        target = tuple(int(x) for x in args[args.index("--target") + 1].split(","))
    if "--target-reserved" in args:
        target_res = tuple(int(x) for x in args[args.index("--target-reserved") + 1].split(","))
    if "--swap" in args:
        k = args.index("--swap")
        swap = int(args[k + 1]), int(args[k + 2])
    if "--random" in args:
        n_random = int(args[args.index("--random") + 1])
    reqs, segs = requests(trace)
    own = [a for _, a, _ in segs]
    low, high = min(own), max(own)

    def run(addrs):
        # a segment the trace did not make goes far below every other
        return replay(reqs, lambda k: addrs[k] if k < len(addrs) else low - (k + 1) * (1 << 36), bounds)

    base = run(own)
    print("replayed over the trace's addresses, per phase (peak allocated, peak reserved):", base)

    def report(label, addrs):
        got = run(addrs)
        d_alloc = tuple(p - q for (p, _), (q, _) in zip(got, base, strict=True))
        d_res = tuple(p - q for (_, p), (_, q) in zip(got, base, strict=True))
        if any(d_alloc) or any(d_res):
            hit = target is not None and d_alloc == target and d_res == (target_res or (0,) * len(d_res))
            print(
                f"{label}: peak allocated {d_alloc}, peak reserved {d_res}{'  <- the target' if hit else ''}"
            )

    if swap:
        for i in range(swap[0], swap[1] + 1):
            for j in range(i + 1, swap[1] + 1):
                addrs = list(own)
                addrs[i], addrs[j] = addrs[j], addrs[i]
                report(f"segments {i} ({segs[i][2]:,} B) and {j} ({segs[j][2]:,} B) swapped", addrs)
    elif n_random:
        rng = random.Random(0)
        for t in range(n_random):
            slots = rng.sample(range(1 << 20), len(own))
            report(f"random order {t}", [s << 36 for s in slots])
    else:
        for k in range(len(own)):
            for where, at in (("lowest", low - (1 << 35)), ("highest", high + (1 << 35))):
                addrs = list(own)
                addrs[k] = at
                report(
                    f"segment {k} ({segs[k][2]:,} B, entry {segs[k][0]}) moved to the {where} address", addrs
                )


if __name__ == "__main__":
    main()
