"""Does a figure hang on where the driver put the segments? Replay a history with one segment moved.

    python order_sweep.py HISTORY.pickle                  each segment moved below all others and above
                                                          all others: the reserved figure at the end
    python order_sweep.py HISTORY.pickle GPU.jsonl ROWS   the same, and how many of the first ROWS op
                                                          lines of a GPU per-op truth (ops_truth.py,
                                                          lines with a count) get other blocks

The history's allocations and frees are replayed through a one-stream caching allocator as
CUDACachingAllocator.cpp runs it: a request rounded to 512 bytes; the smallest free block of its pool
that fits, of equal ones the lowest address (`BlockComparatorSize`); a new segment where none fits
(2 MiB for requests up to 1 MiB, 20 MiB below 10 MiB, else the request rounded to 2 MiB); the rest
split off where it is at least 512 bytes (small pool) or more than 1 MiB (large); a freed block
merged with its free neighbours. Only the segments' order by address enters, so the replay with the
history's own addresses gives back its blocks (checked first), and a moved segment shows whether
that one placement (the driver's, docs/driver-placement.md) decides the figure. Not modelled:
several streams, `empty_cache`, expandable segments, `max_split_size_mb`, out-of-memory retries.
"""

import bisect
import json
import sys

from block_diff import load_trace, replay, round_size, segment_size

MB = 1 << 20


class Allocator:
    """One stream's small and large pools; `place(n)` gives the n-th new segment's address."""

    def __init__(self, place):
        self.place, self.segments, self.reserved = place, 0, 0
        self.free = {True: [], False: []}  # pool (small?) -> sorted (size, address)
        self.blocks = {}  # address -> [size, allocated, segment start, small]

    def malloc(self, request):
        size = round_size(request)
        small = size <= MB
        pool = self.free[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            extent, addr = pool.pop(i)
        else:
            extent, addr = segment_size(size), self.place(self.segments)
            self.segments += 1
            self.reserved += extent
            self.blocks[addr] = [extent, False, addr, small]
        block = self.blocks[addr]
        rest = extent - size
        if rest >= 512 if small else rest > MB:
            self.blocks[addr + size] = [rest, False, block[2], small]
            bisect.insort(pool, (rest, addr + size))
            block[0] = size
        block[1] = True
        return addr, block[0]

    def release(self, addr):
        block = self.blocks[addr]
        block[1] = False
        pool = self.free[block[3]]
        after = self.blocks.get(addr + block[0])
        if after is not None and after[2] == block[2] and not after[1]:
            pool.remove((after[0], addr + block[0]))
            del self.blocks[addr + block[0]]
            block[0] += after[0]
        if addr != block[2]:
            before = block[2]
            while before + self.blocks[before][0] != addr:
                before += self.blocks[before][0]
            if not self.blocks[before][1]:
                pool.remove((self.blocks[before][0], before))
                self.blocks[before][0] += block[0]
                del self.blocks[addr]
                addr, block = before, self.blocks[before]
        bisect.insort(pool, (block[0], addr))


def run(events, rank):
    """Replays `events` with the n-th segment at the n-th place of `rank` (a sort key per segment)."""
    order = sorted(range(len(rank)), key=rank.__getitem__)
    addresses = {n: (i + 1) << 40 for i, n in enumerate(order)}
    alloc, live, blocks = Allocator(addresses.__getitem__), {}, []
    for action, addr, size in events:
        if action == "alloc":
            live[addr], block = alloc.malloc(size)
            blocks.append(block)
        elif addr in live:
            alloc.release(live.pop(addr))
    return blocks, alloc.reserved


def mismatches(blocks, truth, rows):
    """How many of the first `rows` op lines with allocations get another sum of blocks."""
    bad, k = 0, 0
    for r in truth[:rows]:
        bad += sum(blocks[k : k + r["count"]]) != r["rounded"]
        k += r["count"]
    return bad


def main():
    trace = load_trace(sys.argv[1])
    events = [
        (e["action"], e["addr"], e["size"]) for e in trace if e["action"] in ("alloc", "free_completed")
    ]
    starts = [e["addr"] for e in trace if e["action"] == "segment_alloc"]
    if any(e["action"] == "segment_free" for e in trace):
        sys.exit("the history frees segments (empty_cache or an out-of-memory retry): not modelled")
    truth = None
    if len(sys.argv) > 3:
        with open(sys.argv[2]) as f:
            lines = (json.loads(x) for x in f if x.startswith('{"op"'))
            truth = [r for r in lines if r["count"]]
        rows = int(sys.argv[3])
    sizes = [e["size"] for e in trace if e["action"] == "segment_alloc"]
    rank = [float(sorted(starts).index(a)) for a in starts]
    blocks, reserved = run(events, rank)
    own = [b for _, _, b, _ in replay(sys.argv[1])[0] if b]
    print(f"replay with the history's addresses: {len(starts)} segments, reserved {reserved:,}", end="")
    print(", blocks as the history's" if blocks == own else ", blocks NOT as the history's (not modelled)")
    base = mismatches(blocks, truth, rows) if truth is not None else None
    if truth is not None:
        print(f"  GPU truth: {base} of the first {rows} op lines differ")
    for n in range(len(starts)):
        for where, key in (("lowest", -1.0), ("highest", len(starts) + 1.0)):
            moved = list(rank)
            moved[n] = key
            blocks, res = run(events, moved)
            bad = mismatches(blocks, truth, rows) if truth is not None else None
            if res != reserved or bad != base:
                note = f", GPU truth: {bad} lines differ" if truth is not None else ""
                print(f"segment {n} ({sizes[n]:,} bytes) {where}: reserved {res:,}{note}")


if __name__ == "__main__":
    main()
