"""Where two memory histories of one script first hold different block sizes, or one history's unsplit blocks.

    python block_diff.py GPU.pickle TWIN.pickle [N]     the first N allocations whose blocks differ,
                                                        with the allocated figure after each, and the
                                                        first one's candidate free blocks on each side
    python block_diff.py --allocs GPU.pickle TWIN.pickle [N]
                                                        as the first, over the allocations alone: the
                                                        frees between two allocations may come in
                                                        another order, and streams are numbered in
                                                        the order they first allocate (a GPU's
                                                        stream ids are pointers)
    python block_diff.py --place GPU.pickle TWIN.pickle [N]
                                                        the first N allocations placed in another
                                                        segment (numbered in the order they were
                                                        made) or at another offset in it
    python block_diff.py --life GPU.pickle TWIN.pickle [N]
                                                        the first N allocations (the same requests
                                                        in the same order) freed at another point:
                                                        each free counted in allocations made before
                                                        it, so frees in another order between two
                                                        allocations do not count
    python block_diff.py --cross GPU.pickle TWIN.pickle
                                                        the small pool's best fit replayed with each
                                                        side's requests over the other side's segment
                                                        addresses: does the segment count follow the
                                                        requests or the addresses? and the first
                                                        block the GPU's requests take otherwise
    python block_diff.py --slack SNAPSHOT.pickle START END
                                                        the unsplit blocks live at the peak of the
                                                        allocated figure between trace entries START
                                                        and END

A history's trace gives each allocation's requested size and address, not its block. The block is
rebuilt as CUDACachingAllocator.cpp makes it: the request rounded (`round_size`: 512 bytes at least,
then multiples of 512), taken from the low end of the free block at that address (which runs to the
next live block or the segment's end); the rest split off (`should_split`) where it is at least 512
bytes in a 2 MiB small-pool segment or more than 1 MiB in a large one, else kept in the block. So two
histories with the same allocations in the same order (ops_diff.py silent) can still differ in the
allocated figure where one side's allocation lands in a free block whose rest is too small to split:
which free block is chosen (the smallest that fits, the lowest address of equal ones) depends on where
the segments lie. `--place` shows the first such choice: equal block sizes, another segment or offset.
Not modelled: expandable segments, `max_split_size_mb`, oversize blocks. A history may be xz-compressed
(`NAME.pickle.xz`, as blind_gpu.sh keeps large ones).
"""

import bisect
import lzma
import pickle
import sys

SMALL_SEGMENT = 2 << 20
SMALL_REQUEST = 1 << 20


def load_trace(path):
    """The first device's trace of a history (`NAME.pickle` or `NAME.pickle.xz`)."""
    with (lzma.open if str(path).endswith(".xz") else open)(path, "rb") as f:
        return pickle.load(f)["device_traces"][0]


def round_size(n):
    return 512 if n < 512 else (n + 511) // 512 * 512


def segment_size(size):
    """`get_allocation_size` (CUDACachingAllocator.cpp): the segment a rounded request that fits no
    free block makes."""
    mib = 1 << 20
    if size <= mib:
        return 2 * mib
    if size < 10 * mib:
        return 20 * mib
    return (size + 2 * mib - 1) // (2 * mib) * (2 * mib)


class Segments:
    """A trace's segments as they stand: start -> size, the starts in order, and each segment's
    number in the order the segments were made."""

    def __init__(self):
        self.size, self.starts, self.no = {}, [], {}

    def apply(self, e) -> bool:
        """Takes a `segment_alloc` or `segment_free` entry; False for any other."""
        if e["action"] == "segment_alloc":
            self.size[e["addr"]] = e["size"]
            bisect.insort(self.starts, e["addr"])
            self.no[e["addr"]] = len(self.no)
            return True
        if e["action"] == "segment_free":
            self.size.pop(e["addr"])
            self.starts.remove(e["addr"])
            return True
        return False

    def of(self, addr):
        """The start of the segment holding `addr`."""
        return self.starts[bisect.bisect_right(self.starts, addr) - 1]


def replay(path, stop=None):
    """The trace's allocations and frees with their blocks: a list of (entry index, allocated after it,
    block size or 0 for a free, entry), and the state at `stop` (segments, live blocks)."""
    trace = load_trace(path)
    segs = Segments()
    segments, seg_starts, seg_no = segs.size, segs.starts, segs.no
    live, starts = {}, []
    allocated, out = 0, []
    for i, e in enumerate(trace):
        if i == stop:
            break
        action, addr = e["action"], e.get("addr")  # an `oom` entry has no address
        if segs.apply(e):
            continue
        if action == "alloc":
            seg = segs.of(addr)
            end = seg + segments[seg]
            j = bisect.bisect_right(starts, addr)
            extent = (starts[j] if j < len(starts) and starts[j] < end else end) - addr
            size = round_size(e["size"])
            rest = extent - size
            small = segments[seg] == SMALL_SEGMENT and size <= SMALL_REQUEST
            block = size if (rest >= 512 if small else rest > SMALL_REQUEST) else extent
            live[addr] = (block, size, i)
            bisect.insort(starts, addr)
            allocated += block
            out.append((i, allocated, block, e))
        elif action == "free_completed" and addr in live:
            allocated -= live.pop(addr)[0]
            starts.remove(addr)
            out.append((i, allocated, 0, e))
    return out, (segments, seg_starts, seg_no, live, starts), trace


def free_blocks(state):
    """Every free block of the state: (size, address, segment number, offset, segment size)."""
    segments, seg_starts, seg_no, live, starts = state
    out = []
    for seg in seg_starts:
        pos, end = seg, seg + segments[seg]
        j = bisect.bisect_left(starts, seg)
        while j < len(starts) and starts[j] < end:
            if starts[j] > pos:
                out.append((starts[j] - pos, pos, seg_no[seg], pos - seg, segments[seg]))
            pos = starts[j] + live[starts[j]][0]
            j += 1
        if end > pos:
            out.append((end - pos, pos, seg_no[seg], pos - seg, segments[seg]))
    return sorted(out)


def frames(e, n=4):
    fs = [f for f in e.get("frames", []) if f["filename"].endswith(".py") and "/torch/" not in f["filename"]]
    return " < ".join(f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']}" for f in fs[:n])


def diff(gpu_path, twin_path, n):
    gpu, _, _ = replay(gpu_path)
    twin, _, _ = replay(twin_path)
    print(f"GPU: {len(gpu)} allocations and frees, allocated at the end {gpu[-1][1]:,}")
    print(f"twin: {len(twin)} allocations and frees, allocated at the end {twin[-1][1]:,}")
    shown = []
    for g, t in zip(gpu, twin, strict=False):
        if g[3]["size"] != t[3]["size"] or g[3]["action"] != t[3]["action"]:
            print(f"the sequences part at GPU entry {g[0]}, twin entry {t[0]}: use ops_diff.py first")
            break
        if g[2] != t[2]:
            shown.append((g, t))
            print(
                f"GPU entry {g[0]} / twin {t[0]}: {g[3]['action']} of {g[3]['size']:,}: block "
                f"{g[2]:,} / {t[2]:,}, allocated {g[1]:,} / {t[1]:,}   {frames(g[3])}"
            )
            if len(shown) >= n:
                break
    if not shown:
        print("same blocks throughout")
        return
    g, t = shown[0]
    for name, path, entry in (("GPU", gpu_path, g), ("twin", twin_path, t)):
        _, state, _ = replay(path, stop=entry[0])
        size = round_size(entry[3]["size"])
        fits = [b for b in free_blocks(state) if b[0] >= size][:6]
        print(f"{name}: free blocks that fit {size:,} before entry {entry[0]} (the first is taken):")
        for b in fits:
            print(f"    {b[0]:,} at offset {b[3]:,} of segment #{b[2]} ({b[4]:,} bytes)")


def allocations(path):
    """The trace's allocations as replay's (entry index, allocated after it, block, entry), each entry
    with its stream renumbered in the order the streams first allocate."""
    out, _, _ = replay(path)
    streams = {}
    allocs = [(i, allocated, block, e) for i, allocated, block, e in out if block]
    return [(i, a, b, dict(e, stream=streams.setdefault(e["stream"], len(streams)))) for i, a, b, e in allocs]


def diff_allocs(gpu_path, twin_path, n):
    gpu, twin = allocations(gpu_path), allocations(twin_path)
    print(f"GPU: {len(gpu):,} allocations; twin: {len(twin):,}")
    shown = 0
    for k, (g, t) in enumerate(zip(gpu, twin, strict=False)):
        if (g[3]["size"], g[3]["stream"]) != (t[3]["size"], t[3]["stream"]):
            print(
                f"the requests part at allocation {k} (GPU entry {g[0]}, twin entry {t[0]}): "
                "use ops_diff.py first"
            )
            return
        if g[2] != t[2]:
            print(
                f"allocation {k} (GPU entry {g[0]} / twin {t[0]}): {g[3]['size']:,} on stream "
                f"{g[3]['stream']}: block {g[2]:,} / {t[2]:,}, allocated {g[1]:,} / {t[1]:,}   {frames(g[3])}"
            )
            shown += 1
            if shown >= n:
                return
    if not shown:
        print("same blocks throughout")


def placements(path):
    """Each allocation of the trace: (entry index, requested size, segment number, offset in it),
    segments numbered in the order they were made."""
    trace = load_trace(path)
    segs, out = Segments(), []
    for i, e in enumerate(trace):
        if not segs.apply(e) and e["action"] == "alloc":
            seg = segs.of(e["addr"])
            out.append((i, e["size"], segs.no[seg], e["addr"] - seg, e))
    return out


def place(gpu_path, twin_path, n):
    shown = 0
    for g, t in zip(placements(gpu_path), placements(twin_path), strict=False):
        if g[1] != t[1]:
            print(f"the sequences part at GPU entry {g[0]}, twin entry {t[0]}: use ops_diff.py first")
            return
        if g[2:4] != t[2:4]:
            print(
                f"GPU entry {g[0]} / twin {t[0]}: alloc of {g[1]:,}: segment #{g[2]} + {g[3]:,} / "
                f"#{t[2]} + {t[3]:,}   {frames(t[4])}"
            )
            shown += 1
            if shown >= n:
                return
    if not shown:
        print("same places throughout")


def slack(path, start, end):
    out, _, trace = replay(path)
    best, peak = None, -1
    for i, allocated, _, _ in out:
        if start <= i < end and allocated > peak:
            peak, best = allocated, i
    _, state, _ = replay(path, stop=best + 1)
    print(f"peak allocated {peak:,} at trace entry {best}")
    total = 0
    for block, size, i in sorted(state[3].values(), key=lambda v: v[2]):
        if block != size:
            total += block - size
            print(f"    block {block:,} for a request of {size:,} (entry {i})   {frames(trace[i])}")
    print(f"unsplit: {total:,} bytes beyond the requests")


def lifetimes(path):
    """Each allocation of the trace: [requested size, entry index, allocations made before its free
    (None while live), frames' entry]."""
    trace = load_trace(path)
    out, live = [], {}
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            live[e["addr"]] = len(out)
            out.append([e["size"], i, None, e])
        elif e["action"] == "free_requested" and e["addr"] in live:
            out[live.pop(e["addr"])][2] = len(out)
    return out


def life(gpu_path, twin_path, n):
    gpu, twin = lifetimes(gpu_path), lifetimes(twin_path)
    last = min(len(gpu), len(twin))
    parted = next((k for k in range(last) if gpu[k][0] != twin[k][0]), last)
    if parted < last:
        print(f"the requests part at allocation {parted} (GPU entry {gpu[parted][1]}): use ops_diff.py")
    shown = 0
    for k in range(parted):
        g, t = gpu[k], twin[k]
        # a free after the requests part is not comparable
        if g[2] != t[2] and min(x if x is not None else last for x in (g[2], t[2])) <= parted:
            print(
                f"allocation {k} of {g[0]:,} (GPU entry {g[1]} / twin {t[1]}): freed after allocation "
                f"{g[2]} / {t[2]}   {frames(g[3]) or frames(t[3])}"
            )
            shown += 1
            if shown >= n:
                return
    if not shown:
        print(f"the same lifetimes over the first {parted} allocations")


def small_requests(trace):
    """The small pool's side of a trace: its allocations (requests rounded, at most 1 MiB) and their
    frees as ("alloc", address, size) and ("free", address, 0), and the addresses of its 2 MiB
    segments in the order they were made."""
    out, bases = [], []
    for e in trace:
        action = e["action"]
        if action == "alloc" and round_size(e["size"]) <= SMALL_REQUEST:
            out.append(("alloc", e["addr"], round_size(e["size"])))
        elif action == "free_completed":
            out.append(("free", e["addr"], 0))
        elif action == "segment_alloc" and e["size"] == SMALL_SEGMENT:
            bases.append(e["addr"])
    return out, bases


def best_fit(requests, bases):
    """`requests` (small_requests') replayed through the small pool's best fit over new 2 MiB
    segments at `bases`, taken in order as the pool needs one: CUDACachingAllocator.cpp's
    `get_free_block` takes the smallest free block that fits, the lowest address of equal ones
    (`BlockComparatorSize`; one stream), `alloc_found_block` splits off any rest (512 bytes at least:
    every request is a multiple of 512), `free_block` merges a freed block with free neighbours of
    its segment. Returns each allocation's (segment number, offset, free blocks of its size
    left in other segments as (segment number, offset)) and the allocation numbers (from 1) at which
    a segment was made."""
    free, by_start, by_end = [], {}, {}
    starts, no, taken, made, m = [], {}, [], [], {}

    def add(a, s):
        bisect.insort(free, (s, a))
        by_start[a], by_end[a + s] = s, a

    def remove(a):
        s = by_start.pop(a)
        del by_end[a + s]
        free.remove((s, a))
        return s

    def segment(a):
        return starts[bisect.bisect_right(starts, a) - 1]

    for action, addr, size in requests:
        if action == "alloc":
            i = bisect.bisect_left(free, (size, -1))
            if i == len(free):
                base = bases[len(made)]
                made.append(len(taken) + 1)
                no[base] = len(no)
                bisect.insort(starts, base)
                add(base, SMALL_SEGMENT)
                i = bisect.bisect_left(free, (size, -1))
            block, at = free[i]
            remove(at)
            seg = segment(at)
            ties = [(no[segment(a)], a - segment(a)) for s, a in free if s == block]
            taken.append((no[seg], at - seg, ties))
            if block > size:
                add(at + size, block - size)
            m[addr] = (at, size)
        elif addr in m:
            at, size = m.pop(addr)
            seg = segment(at)
            if at + size in by_start and segment(at + size) == seg:
                size += remove(at + size)
            if at in by_end and segment(by_end[at]) == seg:
                prev = by_end[at]
                size += remove(prev)
                at = prev
            add(at, size)
    return taken, made


def cross(gpu_path, twin_path):
    """Whether the small pool's segment count follows the requests or the segments' addresses."""
    (gpu, gpu_bases), (twin, twin_bases) = (small_requests(load_trace(p)) for p in (gpu_path, twin_path))
    for name, requests, bases in (("GPU", gpu, gpu_bases), ("twin", twin, twin_bases)):
        taken, made = best_fit(requests, bases)
        actual = [addr for action, addr, _ in requests if action == "alloc"]
        # segment numbers count in the order the segments were made, as `bases` lists them
        placed = sum(
            bases[seg] + offset == addr for (seg, offset, _), addr in zip(taken, actual, strict=True)
        )
        print(
            f"{name}: {len(taken):,} small allocations, {placed:,} where best fit over its own segments puts "
            f"them, {len(made)} segments"
        )
    for reqs, segs, label in (
        (gpu, twin_bases, "GPU's requests over the twin's segment addresses"),
        (twin, gpu_bases, "twin's requests over the GPU's segment addresses"),
    ):
        try:
            print(f"{label}: {len(best_fit(reqs, segs)[1])} segments")
        except IndexError:
            print(f"{label}: more segments than the other side made")
    own, other = best_fit(gpu, gpu_bases)[0], best_fit(gpu, twin_bases)[0]
    for k, (g, t) in enumerate(zip(own, other, strict=False)):
        if g[:2] != t[:2]:
            print(
                f"the GPU's requests first take another block at small allocation {k + 1:,}: segment "
                f"#{g[0]} + {g[1]:,} over the GPU's addresses (free blocks of its size: {g[2][:4]}), "
                f"#{t[0]} + {t[1]:,} over the twin's ({t[2][:4]}); small segments numbered from 0 in the "
                "order they were made"
            )
            for s in sorted({g[0], t[0]} | {x[0] for x in g[2][:4] + t[2][:4]}):
                print(
                    f"    segment #{s}: GPU {(gpu_bases[s] - gpu_bases[0]) / 2**20:+.0f} MiB, "
                    f"twin {(twin_bases[s] - twin_bases[0]) / 2**20:+.0f} MiB from the first small segment"
                )
            return
    print("the GPU's requests take the same blocks over either side's addresses")


def main():
    if sys.argv[1] == "--life":
        life(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5)
    elif sys.argv[1] == "--slack":
        slack(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "--cross":
        cross(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--allocs":
        diff_allocs(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5)
    elif sys.argv[1] == "--place":
        place(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5)
    else:
        diff(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)


if __name__ == "__main__":
    main()
