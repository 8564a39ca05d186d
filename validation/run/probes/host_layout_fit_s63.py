"""Session 63 (blind270/jk04): which host layout above the CUDA context puts a host-built model's
`.to("cuda")` chunks where the GPU's memory history has them (driver address-space rules 1-3 and 11,
docs/driver-placement.md).

    # 1. the host tensors of SCRIPT's build, top down, and when each is unmapped (allocation count),
    #    every tensor this process's glibc mapped laid out (no threshold veto), contiguous from B+246:
    PYTHONPATH=/tmp/tv_timm:python python3 host_layout_fit_s63.py events SCRIPT EVENTS.txt
    # 2. simulate rules 1-3 over the GPU history's segments with that layout (shifted by SHIFT MiB, a
    #    1 MiB held range above each BLOCKERS item, counted from the top); without --shift, search
    #    the shift and up to three 1 MiB held ranges greedily:
    python3 host_layout_fit_s63.py fit GPU.pickle EVENTS.txt [--shift S --blockers 36,85,137]
    # 3. SCRIPT under the twin with that layout (its top at TOP MiB over B):
    PYTHONPATH=/tmp/tv_timm:python python3 host_layout_fit_s63.py run SCRIPT TOP 36,85,137 [run options]

The simulation starts at the first segment the GPU put above B+96 (the host tensors' range), with the
lowest chunk under the segments before it, and places each later segment by rule 2 (the newest chunk
with a hole, best fit) among the chunks it made, else by rule 3 (the highest released range at least
32 MiB larger than the chunk) or rule 1 (below the lowest chunk). It stops at the first segment of
--upto (default 94: jk04's `.to("cuda")`; its 95th segment goes into the context's released range,
rule 6, which this does not model).

Session 63, jk04 (/work/gpu_s62/f/h/jk04.pickle.xz): `fit` prints `first mismatch: None` with
`--shift -6.5 --blockers 36,85,137` (all 153 tensors of 1.88 MiB and more, and three 1 MiB ranges: on this
machine those are CPython's object arenas, `jk04_host_arenas_probe_s63.py`); the twin's layout (95
tensors, its threshold) first misses at segment 10 (at 12 at best, shifted); the 153 without held
ranges at 18 at best. `run` with TOP 1322.098 gives every figure of jk04's H100 record and
`segments_order_s62.py` finds no allocation placed differently (docs/driver-placement.md, session 63)."""

import os
import pickle
import sys

MIB = 1 << 20


def mapping_len(nbytes):
    """glibc's mapping for `posix_memalign(64, nbytes)` (`vramscope_alloc::HostHeap::malloc`)."""
    n = ((nbytes + 8 + 15) // 16 * 16 + 64 + 32 + 15) // 16 * 16
    return (n + 8 + 4095) // 4096 * 4096


def _patch(layout):
    """Run `vramscope run` in this process with `layout(sizes)` -> (offsets, held) deciding where each
    host tensor (ascending address) goes: offsets in bytes over B, and held 1 MiB ranges."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
    from vramscope import _capture

    log = []
    count = [0]

    class Device:
        def __init__(self, d, sizes):
            offsets, held = layout(sizes)
            self.__dict__.update(_d=d, offsets=offsets, k=0, at={})
            for lo in held:
                d.host_at(int(lo), MIB)

        def host_mapping_len(self, nbytes):
            return mapping_len(nbytes)

        def host_before_context(self, nbytes, *_):
            off = round(self.offsets[self.k])
            self.k += 1
            length = mapping_len(nbytes)
            addr = self._d.host_at(off, length)
            if addr is None:
                return None
            self.at[addr] = off
            log.append(f"map {off / MIB:.3f} {(off + length) / MIB:.3f} {nbytes}")
            return addr, length

        def host_unmapped(self, addr, length):
            off = self.at[addr]
            log.append(f"unmap @{count[0]} {off / MIB:.3f} {(off + length) / MIB:.3f}")
            return self._d.host_unmapped(addr, length)

        def __getattr__(self, name):
            return getattr(self._d, name)

    original = _capture.Capture._map_host_tensors

    def map_host_tensors(self):
        device = self.device
        storages = sorted(self._host_storages(), key=lambda st: st.data_ptr())
        sizes = [st.nbytes() for st in storages if _capture._glibc_mapping(st.data_ptr(), st.nbytes())]
        self.__dict__["device"] = Device(device, sizes)
        try:
            return original(self)
        finally:
            self.__dict__["device"] = device

    malloc = _capture.Capture._malloc_handle

    def malloc_handle(self, *args):
        count[0] += 1
        return malloc(self, *args)

    _capture.Capture._map_host_tensors = map_host_tensors
    _capture.Capture._malloc_handle = malloc_handle
    return log


def contiguous(sizes, top=None, blockers=()):
    """Offsets (ascending address order) of the tensors laid out contiguously: from B+246 up, or
    top-down from `top` MiB with a 1 MiB held range above each item of `blockers` (from the top)."""
    if top is None:
        offs, at = [], 246 * MIB
        for n in sizes:
            offs.append(at)
            at += mapping_len(n)
        return offs, []
    at, offs, held = top * MIB, [], []
    for j, n in enumerate(reversed(sizes)):
        if j in blockers:
            at -= MIB
            held.append(at)
        at -= mapping_len(n)
        offs.append(at)
    return offs[::-1], held


def main_events(script, out, *rest):
    log = _patch(contiguous)
    from vramscope.__main__ import main

    try:
        main(["run", "--gpu", "h100", "--quiet", *rest, script])
    finally:
        with open(out, "w") as f:
            f.write("\n".join(log) + "\n")


def main_run(script, top, blockers, *rest):
    held = {int(x) for x in blockers.split(",") if x}
    _patch(lambda sizes: contiguous(sizes, float(top), held))
    from vramscope.__main__ import main

    sys.exit(main(["run", "--gpu", "h100", "--quiet", *rest, script]))


def gpu_segments(path, upto):
    """(allocation count, MiB, offset from B in MiB) of the history's segments; B is the first
    segment's address + 2 MiB (jk04's first segment lies at B-2: rule 4's small hole)."""
    with open(path, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    out, k = [], 0
    for e in trace:
        if e["action"] == "alloc":
            k += 1
        elif e["action"] == "segment_alloc":
            out.append((k, e["size"] / MIB, e["addr"]))
    base = out[0][2] + 2 * MIB
    return [(k, s, (a - base) / MIB) for k, s, a in out[:upto]]


def read_events(path):
    items, unmapped = [], {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if p and p[0] == "map":
                items.append((float(p[1]), float(p[2])))
            elif p and p[0] == "unmap":
                unmapped[(float(p[2]), float(p[3]))] = int(p[1][1:])
    items.sort(key=lambda x: -x[0])  # top down
    return [(hi - lo, unmapped.get((lo, hi))) for lo, hi in items], items[0][1]


class Space:
    """Rules 1-3 over the host range: released ranges, the chunks made since the start, the lowest."""

    def __init__(self, lowest):
        self.released, self.chunks, self.lowest = [], [], lowest

    def release(self, lo, hi):
        rs = sorted([*self.released, (lo, hi)])
        merged = []
        for a, b in rs:
            if merged and merged[-1][1] >= a - 1e-9:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.released = merged

    def take(self, lo, hi):
        out = []
        for a, b in self.released:
            if b <= lo or a >= hi:
                out.append((a, b))
                continue
            if a < lo:
                out.append((a, lo))
            if b > hi:
                out.append((hi, b))
        self.released = out

    def malloc(self, size):
        size = -(-size // 2) * 2
        for lo, hi, used in reversed(self.chunks):  # rule 2
            at, holes = lo, []
            for a, s in sorted(used):
                if a > at:
                    holes.append((a - at, at))
                at = max(at, a + s)
            if hi > at:
                holes.append((hi - at, at))
            fit = [h for h in holes if h[0] >= size]
            if fit:
                _, a = min(fit)
                used.append((a, size))
                return a
        length = -(-size // 32) * 32
        tops = [b for a, b in self.released if b - a >= length + 32]  # rule 3
        if tops:
            lo = (max(tops) - length) // 32 * 32
            self.take(lo, lo + length)
        else:  # rule 1
            lo = self.lowest // 32 * 32 - length
            self.lowest = lo
        self.chunks.append((lo, lo + length, [(lo, size)]))
        return lo


def simulate(segs, items, top, shift, blockers):
    """Per segment from the first above B+96: (index, allocation count, MiB, GPU offset, predicted)."""
    start = next(i for i, (_, _, off) in enumerate(segs) if off >= 96)
    space = Space(min(off for _, _, off in segs[:start]))
    frees, at = [], top + shift
    for j, (length, t) in enumerate(items):
        if j in blockers:
            at -= 1.0
        if t is not None:
            frees.append((t, at - length, at))
        at -= length
    frees.sort()
    out, f = [], 0
    for i, (k, size, off) in enumerate(segs[start:], start):
        while f < len(frees) and frees[f][0] <= k:
            space.release(frees[f][1], frees[f][2])
            f += 1
        out.append((i, k, size, off, space.malloc(size)))
    return out


def first_miss(res):
    return next((r for r in res if r[3] != r[4]), None)


def main_fit(gpu, events, *opts):
    args = dict(zip(opts[::2], opts[1::2], strict=False))
    segs = gpu_segments(gpu, int(args.get("--upto", 94)))
    items, top = read_events(events)
    if "--shift" in args:
        blockers = {int(x) for x in args.get("--blockers", "").split(",") if x}
        res = simulate(segs, items, top, float(args["--shift"]), blockers)
        for r in res:
            print(*r, "" if r[3] == r[4] else "<<")
        print("first mismatch:", first_miss(res))
        return

    def reach(shift, blockers):
        miss = first_miss(simulate(segs, items, top, shift, blockers))
        return miss[0] if miss else len(segs)

    shifts = [x / 4 for x in range(-64, 33)]
    chosen = set()
    for _ in range(4):
        best = max(
            (
                (reach(s, chosen | ({j} if j is not None else set())), s, j)
                for s in shifts
                for j in [None, *range(len(items))]
            ),
            key=lambda x: (x[0], x[2] is None),
        )
        held = sorted(chosen | ({best[2]} if best[2] is not None else set()))
        print(f"blockers {held} shift {best[1]}: reaches segment {best[0]}")
        if best[2] is None or best[0] >= len(segs):
            break
        chosen.add(best[2])


if __name__ == "__main__":
    {"events": main_events, "run": main_run, "fit": main_fit}[sys.argv[1]](*sys.argv[2:])
