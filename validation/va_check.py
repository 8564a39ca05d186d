"""What `va_maps.py VA_MAPS_OPS=1` runs show of the address space of `forward0`, offline.

    python3 validation/va_check.py rule fixtures/va_maps/maps.tar.xz fixtures/va_maps/ops2.tar.xz
    python3 validation/va_check.py footprints fixtures/va_maps/maps.tar.xz fixtures/va_maps/ops2.tar.xz
    python3 validation/va_check.py gemms fixtures/va_maps/kernels.tar.xz
    python3 validation/va_check.py mlog fixtures/va_maps/mlog.tar.xz
    python3 validation/va_check.py firstuse fixtures/va_maps/mlog.tar.xz

Reads the op-by-op runs (`ops/NAME.maps.json` and `ops/NAME.segments.json` in each archive) from
the end of `load` to the end of `forward0`. Offsets are MiB from the anchor B (the 20 MiB segment
of `load` at B+72). At each op's stop, what it newly mapped is sorted into:
- `chunk`: a segment's chunk (the 32 MiB aligned range around a segment the trace created);
- `resv`: the rest of a new anonymous `---p` mapping (the driver's own reservations);
- `host`: a new anonymous `rw-p` mapping (host memory the driver or a library allocated);
- mappings of files (libraries) are left out.

`rule` checks one placement rule for all three, Linux's top-down mmap seen from the driver:
- a chunk of `len` (the segment rounded up to 32 MiB) or a reservation goes into the highest
  free gap of at least `len` + 32 MiB, at the highest 32 MiB aligned address that leaves it room
  (the driver maps `len` + 32 MiB and keeps an aligned `len` of it);
- host memory of `size` goes to the top of the highest free gap of at least `size`.
Within one op's stop, the new mappings are taken from the highest down (the order is not
recorded; top-down placement serves earlier ones higher). Each is then put where the GPU put it,
so one miss does not move the next. The first op that maps anything (the context's release, the
driver's 504 MiB reservation, pinned memory: `fixtures/va_maps/README.md`) is taken as recorded.

`footprints` lists, for every op, what its first use took of host memory, workload by workload:
new anonymous `rw-p` mappings of 1 MiB or more, the growth of `[heap]` (glibc serves a request
from one or the other), and the cuDNN libraries it loaded.

`mlog` reads `validation/malloc_log.c`'s logs (`NAME.mlog`): for each workload, glibc's mmap
threshold when `from_config` maps its first tensor, and how well glibc's dynamic-threshold rule
predicts which malloc-family calls of 64 KiB or more it served with a mapping of their own, stage
by stage (`malloc/malloc.c`: a request whose padded size is at least the threshold is mapped
unless a free chunk of the heap holds it; freeing a mapped chunk larger than the threshold and at
most 32 MiB raises the threshold to its size).

`firstuse` lists, for each aten op of `forward0` at its first use, the malloc-family requests of
1 MiB or more made between the op's start and its stop, workload by workload (mapped ones marked
`*`), and whether every workload that ran the op made the same requests.

`gemms` lists each workload's first-forward GEMM kernels in order of first use, from
`hf_cases.py` with KERNELS=1 (`NAME.kernels.json`).
"""
import io
import json
import os
import sys
import tarfile

MIB = 1 << 20
CHUNK = 32 * MIB
# Gaps are searched from B + CEILING down. Every ceiling from B+238 MiB to B+9000 MiB gives the
# same counts: the gaps higher up, among the libraries mapped before CUDA's 8 GiB reservation of
# `init` (B+256 MiB onwards), are never taken; with no ceiling the rule fails everywhere.
CEILING = 1024 * MIB


def runs(archive, suffix=".maps.json"):
    """(name, {file suffix: parsed json}) of each run in a .tar.xz (any tar) or directory."""
    files = {}
    if os.path.isdir(archive):
        for root, _, names in os.walk(archive):
            for n in names:
                with open(os.path.join(root, n), "rb") as f:
                    files[os.path.relpath(os.path.join(root, n), archive)] = f.read()
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                if m.isfile() and m.name.endswith(".json"):
                    files[m.name] = t.extractfile(m).read()
    by = {}
    for path, data in files.items():
        if "ops/" not in path and suffix == ".maps.json":
            continue
        base = os.path.basename(path)
        for s in (".maps.json", ".segments.json", ".kernels.json"):
            if base.endswith(s):
                by.setdefault((os.path.dirname(path), base[: -len(s)]), {})[s] = json.load(io.BytesIO(data))
    return [(n, d) for (_, n), d in sorted(by.items()) if suffix in d]


def parse(text):
    out = []
    for line in text.splitlines():
        f = line.split(None, 5)
        a, b = (int(x, 16) for x in f[0].split("-"))
        out.append((a, b))
    return out


def new_parts(stop):
    """The parts of the stop's added mappings that were not mapped before, with perms and path."""
    rem = [(a, b) for a, b, _, _ in stop["removed"]]
    out = []
    for a, b, perms, path in stop["added"]:
        parts = [(a, b)]
        for ra, rb in rem:
            nxt = []
            for pa, pb in parts:
                if rb <= pa or ra >= pb:
                    nxt.append((pa, pb))
                    continue
                if pa < ra:
                    nxt.append((pa, ra))
                if rb < pb:
                    nxt.append((rb, pb))
            parts = nxt
        out += [(pa, pb, perms, path) for pa, pb in parts]
    return out


def forward0(run):
    m, segs = run[".maps.json"], run[".segments.json"]["segments"]
    top = max((s[2] for s in segs[:10] if s[3] == 20 * MIB), default=None)
    stops = m["stops"]
    i0 = next((i for i, x in enumerate(stops) if x["label"] == "end load"), None)
    i1 = next((i for i, x in enumerate(stops) if x["label"] == "end forward0"), None)
    if top is None or i0 is None or i1 is None:
        return None
    return top - 72 * MIB, stops, i0, i1, segs


def check_rule(name, run, verbose):
    f0 = forward0(run)
    if f0 is None:
        print(f"{name:52} left out: no anchor or no forward0")
        return {}
    b, stops, i0, i1, segs = f0
    occ = parse(stops[i0]["maps"])
    # the search starts below B + CEILING (see CEILING)
    ceiling = b + CEILING
    created = sorted((s[2], s[3], s[0]) for s in segs if s[1] == "segment_alloc")
    seen = set()
    tally = {}
    first = True

    def gaps():
        iv = sorted(occ)
        return sorted(((b1, a2) for (_, b1), (a2, _) in zip(iv, iv[1:]) if a2 > b1 and a2 <= ceiling),
                      key=lambda g: -g[1])

    def chunk_at(length):
        return next(((hi - length) // CHUNK * CHUNK for lo, hi in gaps() if hi - lo >= length + CHUNK), None)

    def host_at(size):
        return next((hi - size for lo, hi in gaps() if hi - lo >= size), None)

    for i in range(i0 + 1, i1 + 1):
        stop = stops[i]
        raw = new_parts(stop)
        events, other = [], []
        for lo, hi, perms, path in raw:
            if path or perms not in ("---p", "rw-p"):
                other.append((lo, hi))  # libraries and the like: where they were put
                continue
            if perms == "---p":
                chunks = []
                for a, size, idx in created:
                    if lo <= a < hi and idx not in seen:
                        seen.add(idx)
                        c0 = a // CHUNK * CHUNK
                        c1 = c0 + (a - c0 + size + CHUNK - 1) // CHUNK * CHUNK
                        if chunks and c0 < chunks[-1][1]:
                            chunks[-1] = (chunks[-1][0], max(c1, chunks[-1][1]))
                        else:
                            chunks.append((c0, c1))
                events += [("chunk", c0, c1) for c0, c1 in chunks]
                at = lo
                for c0, c1 in sorted(chunks):
                    if c0 > at:
                        events.append(("resv", at, c0))
                    at = max(at, c1)
                if at < hi:
                    events.append(("resv", at, hi))
            elif perms == "rw-p":
                events.append(("host", lo, hi))
        # what this stop kept of the mappings before it
        for a, c in [(a, c) for a, c, _, _ in stop["removed"]]:
            if (a, c) in occ:
                occ.remove((a, c))
        for a, c, _, _ in stop["added"]:
            at = a
            for lo, hi, _, _ in sorted(p for p in raw if a <= p[0] < c):
                if lo > at:
                    occ.append((at, lo))
                at = max(at, hi)
            if at < c and not any(lo <= at < hi for lo, hi, _, _ in raw):
                occ.append((at, c))
        occ += other
        if first and events:
            # the first op that maps anything: the context's release and the driver's 504 MiB
            first = False
            occ += [(lo, hi) for _, lo, hi in events]
            continue
        for kind, lo, hi in sorted(events, key=lambda e: -e[1]):
            want = chunk_at(hi - lo) if kind in ("chunk", "resv") else host_at(hi - lo)
            cls = kind if kind != "host" else ("host >= 8 MiB" if hi - lo >= 8 * MIB else "host < 8 MiB")
            tally.setdefault(cls, [0, 0])[0 if want == lo else 1] += 1
            if verbose or want != lo:
                got = "-" if want is None else f"{(want - b) / MIB:+.2f}"
                print(f"    {stop['label'][:40]:40} {kind:5} {(hi - lo) / MIB:7.2f} MiB at {(lo - b) / MIB:+9.2f}"
                      f", rule {got}{'' if want == lo else '  MISS'}")
            occ.append((lo, hi))
    print(f"{name:52} " + "  ".join(f"{k} {v[0]}/{sum(v)}" for k, v in sorted(tally.items())))
    return tally


def footprints(all_runs):
    rows = {}
    for name, run in all_runs:
        f0 = forward0(run)
        if f0 is None:
            continue
        _, stops, i0, i1, _ = f0
        done = set()
        for stop in stops[i0 + 1:i1 + 1]:
            if stop["label"] in done:
                continue
            host, heap, libs = [], 0.0, set()
            for lo, hi, perms, path in new_parts(stop):
                if path == "[heap]":
                    heap += (hi - lo) / MIB
                elif path:
                    if "libcudnn" in path:
                        libs.add(os.path.basename(path).replace("libcudnn_", "").replace(".so.9", ""))
                elif perms == "rw-p" and hi - lo >= MIB:
                    host.append(round((hi - lo) / MIB, 2))
            if host or libs or heap >= 1:
                done.add(stop["label"])
                rows.setdefault(stop["label"], []).append((name, sorted(host, reverse=True), heap, sorted(libs)))
    for op, found in sorted(rows.items()):
        print(op)
        for name, host, heap, libs in found:
            print(f"    {name[:50]:50} {sum(host) + heap:7.2f} = mapped {' + '.join(map(str, host)) or '0':24}"
                  f" heap {heap:6.2f} {' '.join(libs)}")


def gemms(all_runs):
    marks = ("gemm", "nvjet", "xmma", "Kernel2")
    for name, run in all_runs:
        seen = []
        for op, kernels in run[".kernels.json"]:
            for k in kernels:
                if k not in seen and any(t in k for t in marks):
                    seen.append(k)
                    print(f"{name[:44]:44} {op[:14]:14} {k[:100]}")


def mlogs(archive):
    """{name: text} of each `NAME.mlog` (`validation/malloc_log.c`) in a .tar.xz."""
    logs = {}
    with tarfile.open(archive) as t:
        for m in t.getmembers():
            if m.isfile() and m.name.endswith(".mlog"):
                logs[os.path.basename(m.name)[:-5]] = t.extractfile(m).read().decode(errors="replace")
    return logs


def mlog(archive):
    logs = mlogs(archive)
    stages = ("import", "from_config", ".cuda()", "load", "forward0", "later")
    total = {}
    for name, text in sorted(logs.items()):
        threshold, stage, first = 128 * 1024, "import", None
        tally = {}
        for line in text.splitlines():
            f = line.split()
            if not f:
                continue
            if f[0] == "#":
                label = " ".join(f[1:3])
                stage = {"init": "from_config", "cpu_model": ".cuda()", "cuda": "load", "end load": "forward0",
                         "end forward0": "later"}.get(label, stage)
                continue
            if f[0] == "f" and f[3] == "1" and f[4] != "realloc":
                chunk = int(f[2])
                # `chunksize_nomask`: with the IS_MMAPPED bit (realloc's frees are left out: a
                # realloc of a mapped chunk remaps it, but `realloc(p, 0)` frees it, not seen here)
                if threshold < chunk | 2 <= 32 * MIB:
                    threshold = chunk
            elif f[0] == "m":
                req, mapped = int(f[1]), f[4] == "1"
                if first is None and mapped and stage == "from_config" and f[5].startswith("libc10"):
                    first = threshold
                padded = max(32, (req + 8 + 15) // 16 * 16)
                # posix_memalign(64): `_int_memalign` asks for 64 + MINSIZE more
                if f[5].startswith("libc10"):
                    padded = (padded + 96 + 8 + 15) // 16 * 16
                key = (stage, "mapped" if mapped else "heap", padded >= threshold)
                tally[key] = tally.get(key, 0) + 1
                total[key] = total.get(key, 0) + 1
        print(f"{name[:52]:52} threshold at the first tensor: {first}")
        for st in stages[1:]:
            row = {k: v for k, v in tally.items() if k[0] == st}
            if row:
                print(f"    {st:12} " + "  ".join(
                    f"{kind} {sum(v for k, v in row.items() if k[1] == kind and k[2] == (kind == 'mapped'))}"
                    f"/{sum(v for k, v in row.items() if k[1] == kind)} as the rule says"
                    for kind in ("mapped", "heap")))
    print("all, after import: " + "  ".join(
        f"{kind} {sum(v for k, v in total.items() if k[0] != 'import' and k[1] == kind and k[2] == (kind == 'mapped'))}"
        f"/{sum(v for k, v in total.items() if k[0] != 'import' and k[1] == kind)} as the rule says"
        for kind in ("mapped", "heap")))


def firstuse(archive):
    logs = mlogs(archive)
    table = {}
    for name, text in sorted(logs.items()):
        started, events, seen = False, [], set()
        for line in text.splitlines():
            f = line.split()
            if not f:
                continue
            if f[0] == "#":
                label = " ".join(f[1:])
                if label == "end load":
                    started, events = True, []
                elif started:
                    if label == "end forward0":
                        break
                    if label not in seen:
                        seen.add(label)
                        table.setdefault(label, {})[name] = events
                    events = []
                continue
            if started and f[0] == "m" and int(f[1]) >= MIB:
                events.append(f"{int(f[1]) / MIB:.2f}{'*' if f[4] == '1' else ''}")
    same = 0
    for op, by in table.items():
        lists = {tuple(x.rstrip("*") for x in v) for v in by.values()}
        if not any(by.values()):
            continue
        same += len(lists) == 1
        print(f"{op[:44]:44} {'same in all' if len(lists) == 1 else 'differs':12} ({len(by)} workloads)")
        for name, v in by.items():
            print(f"    {name[:46]:46} {' + '.join(v) or '-'}")
    print(f"ops whose first use requests 1 MiB or more: {sum(1 for b in table.values() if any(b.values()))}, "
          f"the same requests in every workload that ran them: {same}")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("rule", "footprints", "gemms", "mlog", "firstuse"):
        sys.exit(__doc__)
    what, archives = sys.argv[1], sys.argv[2:]
    verbose = bool(os.environ.get("VERBOSE"))
    if what == "gemms":
        gemms([r for a in archives for r in runs(a, ".kernels.json")])
        return
    if what == "mlog":
        for a in archives:
            mlog(a)
        return
    if what == "firstuse":
        for a in archives:
            firstuse(a)
        return
    all_runs = [r for a in archives for r in runs(a)]
    if what == "footprints":
        footprints(all_runs)
        return
    total = {}
    for name, run in all_runs:
        for k, v in check_rule(name, run, verbose).items():
            t = total.setdefault(k, [0, 0])
            t[0] += v[0]
            t[1] += v[1]
    print("all " + "  ".join(f"{k} {v[0]}/{sum(v)}" for k, v in sorted(total.items())))


if __name__ == "__main__":
    main()
