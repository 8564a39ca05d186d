"""Per run: forward0's op stops that map anything of the driver's (new /dev/zero rw-s, ---p reservations
that are no segment's chunk), and forward0's segments, each with the stop where its chunk first shows
(new chunk) or what it fills (pool / hole of chunk c / context). Offsets MiB from B; pool offsets from its top."""
from common import *
only = sys.argv[1] if len(sys.argv) > 1 else ""
arch_only = sys.argv[2] if len(sys.argv) > 2 else ""
for arch, name, d in all_runs():
    if only not in name or arch_only not in arch: continue
    r = load(d, name); b = anchor(r); nl, nf = phase_split(r)
    segs = r[".segments.json"]["segments"]; stops = r[".maps.json"]["stops"]
    pool, p2, p8 = driver_maps(r, b)
    i0, k0 = first_op(r)
    i1 = next(i for i, x in enumerate(stops) if x["label"] == "end forward0")
    # each fwd segment's chunk: the first stop at which an added ---p covers its start
    fw = segs[nl:nf]
    chunkstop = {}
    for k in range(i0 + 1, i1 + 1):
        for lo, hi, p, path in vc.new_parts(stops[k]):
            if p == "---p" and not path:
                for s in fw:
                    if lo <= s[2] < hi and s[0] not in chunkstop: chunkstop[s[0]] = k
    print(f"=== {arch} {name}  pool {mib(pool[0],b):+.0f}..{mib(pool[1],b):+.0f}")
    st = State(b)
    for s in segs[:nl]: st.add(s[2], s[3])
    segi = 0
    for k in range(i0 + 1, i1 + 1):
        drv = []
        for lo, hi, p, path in vc.new_parts(stops[k]):
            if path.startswith("/dev/zero"):
                drv.append(f"pinned {(hi-lo)/MIB:.3f}@{mib(lo,b):+.0f}" + (f"(pool top{(lo-pool[1])/MIB:+.0f})" if pool[0] <= lo < pool[1] else ""))
            elif p == "---p" and not path:
                # parts not a fwd segment's chunk
                cov = sorted(chunk_of(s[2], s[3]) for s in fw if chunkstop.get(s[0]) == k and lo <= s[2] < hi)
                at = lo
                for c0, c1 in cov:
                    if c0 > at: drv.append(f"resv {(c0-at)/MIB:.0f}@{mib(at,b):+.0f}")
                    at = max(at, c1)
                if at < hi and not (lo >= pool[0] and hi <= pool[1]) and not (k == k0):
                    drv.append(f"resv {(hi-at)/MIB:.0f}@{mib(at,b):+.0f}")
        mine = [s for s in fw if chunkstop.get(s[0]) == k]
        if drv or mine:
            print(f"  stop {k-i0:3} {stops[k]['label'][:34]:34} " + " ".join(drv) + ("  chunks: " + " ".join(f"#{s[0]}" for s in mine) if mine else ""))
    for s in fw:
        a, n = s[2], s[3]
        c = next((c for c in st.chunks if c[0] <= a < c[1]), None)
        if pool[0] <= a < pool[1]: what = f"POOL top{(a-pool[1])/MIB:+.0f}"
        else:
            if c: what = f"hole of chunk#{c[2]} {mib(c[0],b):+.0f}..{mib(c[1],b):+.0f}"
            elif b - 416 * MIB <= a < b + 102 * MIB and s[0] not in chunkstop: what = "context range, no new mapping"
            else: what = f"new chunk at stop {chunkstop.get(s[0], '?') - i0 if s[0] in chunkstop else '?'}"
        kind = st.add(a, n) if not pool[0] <= a < pool[1] else "pool"
        print(f"    seg #{s[0]:4} {n/MIB:6.0f} @{mib(a,b):+8.0f}  {what}")
