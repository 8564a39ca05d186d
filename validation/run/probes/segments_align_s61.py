"""Align two memory histories (the GPU's, from validation/run/history.py, and the twin's, from
`vramscope run --snapshot`) allocation by allocation and report where their blocks first go apart
(session 61, blind269/jj04: peak reserved 128 MiB over in one phase with every allocated figure exact,
so the two place some block differently).

    python segments_align_s61.py GPU.pickle TWIN.pickle [CONTEXT]

Walks both event lists in step over `alloc` events (sizes must agree; the first size mismatch is
reported and ends the walk), keeping each side's segments and live blocks, and prints the first
allocation where one side opens a new segment and the other does not, or where the block's offset in
its segment or its segment's size differs, with CONTEXT (default 12) allocations before it, each
with its size, frames and both sides' free blocks >= 1 MiB at that point."""

import pickle
import sys


def events(path):
    with open(path, "rb") as f:
        snap = pickle.load(f)
    return snap["device_traces"][0]


def frames(e, n=4):
    out = []
    for f in e.get("frames") or []:
        name = f.get("name", "")
        if name.startswith(("c10::", "??")) or "CachingAllocator" in f.get("filename", ""):
            continue
        out.append(f"{f.get('filename', '').split('/')[-1]}:{f.get('line')} {name}")
        if len(out) == n:
            break
    return " | ".join(out)


class Side:
    def __init__(self, trace):
        self.trace, self.i = trace, 0
        self.segs, self.blocks = {}, {}

    def next_alloc(self):
        """Apply events up to the next alloc; return (event, opened a segment)."""
        opened = False
        while self.i < len(self.trace):
            e = self.trace[self.i]
            self.i += 1
            a = e["action"]
            if a == "segment_alloc":
                self.segs[e["addr"]] = e["size"]
                opened = True
            elif a == "segment_free":
                self.segs.pop(e["addr"], None)
            elif a == "free_completed":
                self.blocks.pop(e["addr"], None)
            elif a == "alloc":
                self.blocks[e["addr"]] = e["size"]
                return e, opened
        return None, opened

    def where(self, addr):
        for s, n in self.segs.items():
            if s <= addr < s + n:
                return addr - s, n
        return None, None

    def free_blocks(self, floor=1 << 20):
        out = []
        for s, n in sorted(self.segs.items()):
            cur = s
            for a, z in sorted((a, z) for a, z in self.blocks.items() if s <= a < s + n):
                if a - cur >= floor:
                    out.append((a - cur, n))
                cur = a + -(-z // 512) * 512
            if s + n - cur >= floor:
                out.append((s + n - cur, n))
        return sorted(out)


def main():
    gpu, twin = Side(events(sys.argv[1])), Side(events(sys.argv[2]))
    context = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    history, k = [], 0
    while True:
        eg, og = gpu.next_alloc()
        et, ot = twin.next_alloc()
        if eg is None or et is None:
            print(f"{k} allocations aligned, no divergence")
            return
        if eg["size"] != et["size"]:
            print(
                f"allocation {k}: sizes differ: gpu {eg['size']} ({frames(eg)}) "
                f"twin {et['size']} ({frames(et)})"
            )
            break
        wg, wt = gpu.where(eg["addr"]), twin.where(et["addr"])
        history.append((k, eg["size"], frames(et)))
        history = history[-context:]
        if og != ot or wg != wt:
            for h in history:
                print("  ", *h)
            print(
                f"allocation {k} of {eg['size']} ({frames(et)}): gpu new segment {og} offset/segment {wg}; "
                f"twin new segment {ot} offset/segment {wt}"
            )
            print("gpu free >= 1 MiB:", gpu.free_blocks()[-10:])
            print("twin free >= 1 MiB:", twin.free_blocks()[-10:])
            break
        k += 1


if __name__ == "__main__":
    main()
