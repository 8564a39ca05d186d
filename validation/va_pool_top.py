"""What goes into the top 8 MiB of the driver's 512 MiB pool (docs/driver-placement.md, rule 14 and
session 21), from the op-by-op maps of validation/va_run_maps.py and validation/va_host_built.py,
Python 3's standard library only:

    python3 validation/va_pool_top.py fixtures/va_maps/run_maps_h200.tar.xz \\
        fixtures/va_maps/run_maps2_h200.tar.xz fixtures/va_maps/host_built_h200.tar.xz

For each process whose maps show the pool (a 504 MiB `---p` mapping; its top 8 MiB lies above it):
the 2 MiB pinned (`/dev/zero`) buffers mapped in the top and the memory history's 2 MiB segments
that lie there, each as its offset in MiB from the top's low end, in the order they came
(`pinned@STOP` or `seg@EVENT`). Slots neither shows are marked `?`.
"""

import json
import sys
import tarfile

MIB = 1 << 20


def report(name, stops, segments):
    """`stops`: (index, added mappings) in order; `segments`: (event, address, size) allocations."""
    top, pinned = None, []
    for i, added in stops:
        for a, b, perms, path in added:
            if top is None and perms == "---p" and b - a == 504 * MIB:
                top = b
            if top is not None and "zero" in path and b - a == 2 * MIB and top <= a < top + 8 * MIB:
                pinned.append((a - top, f"pinned@{i}"))
    if top is None:
        return
    segs = [(a - top, f"seg@{ev}") for ev, a, size in segments if top <= a < top + 8 * MIB]
    seen = dict(pinned + segs)
    slots = " ".join(f"+{o // MIB}:{seen.get(o, '?')}" for o in range(0, 8 * MIB, 2 * MIB))
    print(f"{name:48s} {slots}")


def main():
    for path in sys.argv[1:]:
        with tarfile.open(path) as tar:
            files = {m.name.split("/")[-1]: m for m in tar.getmembers() if m.isfile()}

            def load(n, files=files, tar=tar):
                return json.loads(tar.extractfile(files[n]).read())

            for n in sorted(files):
                if n.endswith(".m.maps.json"):  # va_run_maps.py: stops [op, name, segments, added, removed]
                    base = n[: -len(".m.maps.json")]
                    stops = [(s[0], s[3]) for s in load(n)["stops"]]
                    events, segs = 0, []
                    for action, addr, size in load(base + ".m.trace.json"):
                        if action == "segment_alloc":
                            segs.append((events, addr, size))
                        elif action in ("alloc", "free_requested"):
                            events += 1
                    report(base, stops, segs)
                elif (
                    n.endswith(".json") and path.find("host_built") >= 0
                ):  # stops [reserved, _, added, removed]
                    d = load(n)
                    stops = [(i, s[2]) for i, s in enumerate(d["stops"])]
                    segs = [(s[0], s[2], s[3]) for s in d["segments"] if s[1] == "segment_alloc"]
                    report(n[: -len(".json")], stops, segs)


if __name__ == "__main__":
    main()
