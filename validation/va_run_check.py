"""Offline report of `validation/va_run_maps.py`'s recordings (fixtures/va_maps/run_maps_h200.tar.xz,
run_maps2_h200.tar.xz), Python 3's standard library only:

    python3 validation/va_run_check.py fixtures/va_maps/run_maps_h200.tar.xz

For each script: the op at which the driver maps its 512 MiB pool (a 504 MiB `---p` mapping beside
its top 8 MiB), the pinned 8.25 MiB and the 2 MiB pinned (`/dev/zero`) buffers after the context's
creation (in MiB from the first segment + 2 MiB: B where that segment lies at B-2), the op at which
`libtriton.so` is mapped, the first segments' offsets (MiB) from each run's first segment in both
processes, and the figures each process printed (docs/driver-placement.md, sessions 10 and 21).
"""

import io
import json
import sys
import tarfile

MIB = 2**20


def main():
    tar = tarfile.open(sys.argv[1])
    files = {m.name.split("/")[-1]: m for m in tar.getmembers() if m.isfile()}

    def load(name):
        return tar.extractfile(files[name]).read()

    names = sorted({n.split(".")[0] for n in files})
    for n in names:
        print(f"== {n}")
        d = json.loads(load(n + ".m.maps.json"))
        # B, the context's anchor, where the m run's first segment lies at B-2
        first = next(e for e in json.loads(load(n + ".m.trace.json")) if e[0] == "segment_alloc")
        anchor, pool_top = first[1] + 2 * MIB, None
        for k, op, segs, added, _ in d["stops"]:
            for a, b, perms, path in added:
                if perms == "---p" and b - a == 504 * MIB:
                    pool_top = b
                    top = f"B{(b - anchor) / MIB:+.0f}"
                    print(f"   pool at op {k} {op} (segments so far {segs}), its top at {top}")
                if "zero" in path and abs((b - a) / MIB - 8.254) < 0.01:
                    print(f"   pinned 8.25 MiB at op {k} {op}, B{(a - anchor) / MIB:+.2f}")
                if (
                    "zero" in path and b - a == 2 * MIB and segs != 1
                ):  # (not the context's own, at its creation)
                    where = " (the pool's top, low end)" if a == pool_top else ""
                    print(f"   pinned 2 MiB at op {k} {op}, B{(a - anchor) / MIB:+.0f}{where}")
                if path == "libtriton.so" and perms == "r-xp":
                    print(f"   libtriton.so at op {k} {op} (segments so far {segs})")
        runs = [run for run in "hm" if f"{n}.{run}.trace.json" in files]  # run_maps2: bl01 has no h run
        for run in runs:
            tr = json.loads(load(f"{n}.{run}.trace.json"))
            s = [e for e in tr if e[0] == "segment_alloc"]
            print(f"   {run} segments " + " ".join(f"{(e[1] - s[0][1]) / MIB:+.0f}" for e in s[:14]))
        for run in runs:
            out = io.TextIOWrapper(io.BytesIO(load(f"{n}.{run}.out"))).read().split("\n")
            print(f"   {run} printed: " + " | ".join(line for line in out if line))


if __name__ == "__main__":
    main()
