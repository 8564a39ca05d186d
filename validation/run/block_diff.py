"""Where two memory histories of one script first hold different block sizes, or one history's unsplit blocks.

    python block_diff.py GPU.pickle TWIN.pickle [N]     the first N allocations whose blocks differ,
                                                        with the allocated figure after each, and the
                                                        first one's candidate free blocks on each side
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


def round_size(n):
    return 512 if n < 512 else (n + 511) // 512 * 512


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
    with (lzma.open if str(path).endswith(".xz") else open)(path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
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


def placements(path):
    """Each allocation of the trace: (entry index, requested size, segment number, offset in it),
    segments numbered in the order they were made."""
    with (lzma.open if str(path).endswith(".xz") else open)(path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
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
    with (lzma.open if str(path).endswith(".xz") else open)(path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
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


def main():
    if sys.argv[1] == "--life":
        life(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5)
    elif sys.argv[1] == "--slack":
        slack(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif sys.argv[1] == "--place":
        place(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 5)
    else:
        diff(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 5)


if __name__ == "__main__":
    main()
