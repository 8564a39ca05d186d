"""libcuda's own mmap/munmap lines (and the ops they belong to) from `end load` to `end forward0`, offsets from B."""
from common import *
only = sys.argv[1] if len(sys.argv) > 1 else ""
for arch, name, d in all_runs():
    r = load(d, name)
    if not r[".mlog"] or only not in name: continue
    b = anchor(r)
    print("===", name)
    p = False; buf = []
    for line in r[".mlog"].splitlines():
        if line == "# end load": p = True; continue
        if not p: continue
        if line.startswith("#"):
            if buf: print(f"  {line[2:][:40]:40} " + " ".join(buf)); buf = []
            if line == "# end forward0": break
            continue
        f = line.split()
        if f[0] in "MU" and "libcuda" in line:
            a = int(f[1], 16); n = int(f[2])
            extra = f" p{f[3]} f{f[4]}" if f[0] == "M" else ""
            buf.append(f"{f[0]}{mib(a,b):+.3f}/{n/MIB:.3f}{extra}")
