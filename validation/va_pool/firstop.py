"""Dump, per run, the end-load chunks/holes near B and the first op stop that maps anything (offsets MiB from B)."""
from common import *
for arch, name, d in all_runs():
    r = load(d, name)
    b = anchor(r); nl, nf = phase_split(r)
    stops = r[".maps.json"]["stops"]
    i0 = next(i for i, x in enumerate(stops) if x["label"] == "end load")
    print(f"=== {arch} {name}  load segs {nl}")
    if r[".mlog"]:
        p = False
        for line in r[".mlog"].splitlines():
            if line == "# end load": p = True; continue
            if p and line[0] in "MU":
                f = line.split()
                a = int(f[1], 16); n = int(f[2])
                print(f"   mlog {f[0]} {mib(a,b):+10.3f} len {n/MIB:8.3f} {' '.join(f[3:])}")
            if p and line.startswith("# aten.embedding"): break
    lo_b, hi_b = b - 20000 * MIB, b + 120 * MIB
    for k, st in enumerate(stops[i0 + 1:], i0 + 1):
        if st["added"] or st["removed"]:
            print("  stop", k - i0, st["label"])
            for a, c, pp, path in st["removed"]:
                if c > lo_b and a < hi_b: print(f"    - {mib(a,b):+10.3f} {mib(c,b):+10.3f} {(c-a)/MIB:9.3f} {pp} {path}")
            for a, c, pp, path in st["added"]:
                if c > lo_b and a < hi_b: print(f"    + {mib(a,b):+10.3f} {mib(c,b):+10.3f} {(c-a)/MIB:9.3f} {pp} {path}")
            break
