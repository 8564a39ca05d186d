"""Q4: what is mapped at the first cuBLAS call of forward0 (the op holding forward0's one 32 MiB segment),
and whether any segment of the whole trace (every phase) later lies in its 64 MiB reservation."""
from common import *
for arch, name, d in all_runs():
    r = load(d, name); b = anchor(r); nl, nf = phase_split(r)
    segs = r[".segments.json"]["segments"]; fw = segs[nl:nf]
    stops = r[".maps.json"]["stops"]; i0, k0 = first_op(r)
    ws = next(s for s in fw if s[3] == 32 * MIB)
    # stop where the workspace's chunk appears
    kws0 = next((k for k in range(k0 + 1, len(stops)) if any(p == "---p" and not path and lo <= ws[2] < hi for lo, hi, p, path in vc.new_parts(stops[k]))), None)
    GEMM = ("aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default")
    kws = next(k for k in range(k0, len(stops)) if stops[k]["label"] in GEMM)
    if kws0 is not None and kws0 != kws: print("  NOTE: workspace chunk at stop", kws0 - i0, "first GEMM at", kws - i0)
    label = stops[kws]["label"]
    new = vc.new_parts(stops[kws])
    resv = []
    for lo, hi, p, path in new:
        if p == "---p" and not path:
            # minus the chunks of forward0's segments that lie in it
            cov = sorted(chunk_of(s[2], s[3]) for s in fw if lo <= s[2] < hi)
            at = lo
            for c0, c1 in cov:
                if c0 > at: resv.append((at, min(c0, hi)))
                at = max(at, c1)
            if at < hi: resv.append((at, hi))
    later_in = [(s[0], s[3] // MIB, mib(s[2], b)) for s in segs for lo, hi in resv if lo <= s[2] < hi]
    # pinned mappings later inside it
    pins = []
    for st in stops[kws + 1:]:
        for a, c, p, path in st["added"]:
            if path.startswith("/dev/zero") and any(lo <= a < hi for lo, hi in resv): pins.append((st["label"], mib(a, b)))
    other = [f"{p} {(hi-lo)/MIB:.2f}@{mib(lo,b):+.2f}{(' ' + os.path.basename(path)) if path else ''}" for lo, hi, p, path in new
             if not (p == "---p" and not path)]
    line = f"{arch:4} {name[:40]:40} stop {kws-i0:3} {label[:22]:22} ws32@{mib(ws[2],b):+.0f} resv " + \
           " ".join(f"{(hi-lo)/MIB:.0f}@{mib(lo,b):+.0f}..{mib(hi,b):+.0f}" for lo, hi in resv) + \
           f" | segments ever in resv: {later_in} | /dev/zero in resv later: {pins}"
    print(line)
    print("      other new mappings at that stop:", "; ".join(other[:12]) + (f" ... (+{len(other)-12})" if len(other) > 12 else ""))
    if r[".mlog"]:
        # the mlog lines of that op: between the previous '#' label and this op's label occurrence number
        text = r[".mlog"].split("# end load", 1)[1]
        n_lab = sum(1 for st in stops[i0 + 1:kws + 1] if st["label"] == label)
        blocks, cur = [], []
        for l in text.splitlines():
            if l.startswith("#"):
                blocks.append((l[2:], cur)); cur = []
            else:
                cur.append(l)
        cnt = 0
        for lab, ls in blocks:
            if lab == label:
                cnt += 1
                if cnt == n_lab:
                    ev = [l for l in ls if l[0] in "MU"]
                    big = [l for l in ls if l[0] == "m" and l.split()[4] == "1"]
                    print("      mlog M/U:", " | ".join(f"{l.split()[0]} {mib(int(l.split()[1],16),b):+.3f} {int(l.split()[2])/MIB:.3f} {' '.join(l.split()[3:])}" for l in ev))
                    print(f"      mlog: {len([l for l in ls if l[0]=='m'])} malloc calls >= 64 KiB, {len(big)} of them mmapped by glibc")
                    break
