"""Offline report of `validation/va_run_maps.py`'s recordings (fixtures/va_maps/run_maps_h200.tar.xz), Python 3's
standard library only:

    python3 validation/va_run_check.py fixtures/va_maps/run_maps_h200.tar.xz

For each script: the op at which the driver maps its 512 MiB pool (a 504 MiB `---p` mapping beside its top 8 MiB)
and the pinned 8.25 MiB, the op at which `libtriton.so` is mapped, the first segments' offsets (MiB) from each
run's first segment in both processes, and the figures each process printed (docs/driver-placement.md, session 10).
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
        for k, op, segs, added, _ in d["stops"]:
            for a, b, perms, path in added:
                if perms == "---p" and b - a == 504 * MIB:
                    print(f"   pool at op {k} {op} (segments so far {segs})")
                if "zero" in path and abs((b - a) / MIB - 8.254) < 0.01:
                    print(f"   pinned 8.25 MiB at op {k} {op}")
                if path == "libtriton.so" and perms == "r-xp":
                    print(f"   libtriton.so at op {k} {op} (segments so far {segs})")
        for run in "hm":
            tr = json.loads(load(f"{n}.{run}.trace.json"))
            s = [e for e in tr if e[0] == "segment_alloc"]
            print(f"   {run} segments " + " ".join(f"{(e[1] - s[0][1]) / MIB:+.0f}" for e in s[:14]))
        for run in "hm":
            out = io.TextIOWrapper(io.BytesIO(load(f"{n}.{run}.out"))).read().split("\n")
            print(f"   {run} printed: " + " | ".join(line for line in out if line))


if __name__ == "__main__":
    main()
