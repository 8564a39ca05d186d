"""Q2: where the 8.25 MiB pinned mapping goes, candidate rules counted over every run.
State: load's segments (+ forward0's pre-launch segments, see common.prelaunch); holes 2 MiB granular;
the request is 8654848 bytes rounded up to 2 MiB = 10 MiB."""
from common import *
SZ = 10 * MIB
rules = {
    "bestfit_low_tie_lowaddr": lambda st: bestfit(st.holes(), SZ),
    "bestfit_low_tie_highaddr": lambda st: bestfit(st.holes(), SZ, high=True),
    "highest_fitting_hole_low_end": lambda st: max((h for h in st.holes() if h[1]-h[0] >= SZ), key=lambda h: h[0])[0],
    "newest_chunk_bestfit_low_end(rule2)": lambda st: rule2(st.holes(), SZ),
    "newest_chunk_bestfit_top": lambda st: rule2(st.holes(), SZ, top=True),
}
tally = {}
verbose = len(sys.argv) > 1
for arch, name, d in all_runs():
    r = load(d, name); b = anchor(r); nl, nf = phase_split(r)
    segs = r[".segments.json"]["segments"]
    pool, p2, p8 = driver_maps(r, b)
    j = prelaunch(segs, nl, nf, pool, b)
    row = []
    for inv in (False, True):
        for pre in (False, True):
            st = State(b)
            for s in segs[:nl]: st.add(s[2], s[3])
            inv_at = None
            if inv:
                inv_at = rule2(st.holes(), 2 * MIB)
                st.segs.append((inv_at, inv_at + 2 * MIB))
            if pre:
                for s in segs[nl:nl + j]: st.add(s[2], s[3])
            for rn, f in rules.items():
                key = (rn, "inv2" if inv else "-", "pre" if pre else "-")
                got = f(st)
                ok = got == p8[0]
                tally.setdefault(key, [0, 0])[0 if ok else 1] += 1
                if verbose and rn.startswith("newest_chunk_bestfit_low") :
                    row.append(f"{'inv' if inv else '-'}/{'pre' if pre else '-'}:{'ok' if ok else 'MISS ' + (f'{mib(got,b):+.0f}' if got else '-')}"
                               + (f" inv2@{mib(inv_at,b):+.0f}" if inv_at else ""))
    if verbose:
        print(f"{arch:4} {name[:44]:44} pin8 {mib(p8[0],b):+6.0f} j={j} | " + " | ".join(row))
print("rule                                      inv2-first  prelaunch-segs  right/runs")
for (rn, inv, pre), (ok, bad) in sorted(tally.items()):
    print(f"{rn:42} {inv:10} {pre:14} {ok}/{ok + bad}")

# the hole the pinned 8.25 MiB went to, in the state with inv0 and the pre-launch segments
print("\nhole taken (state: load + inv0 by rule 2 + pre-launch segments):")
from collections import Counter
sizes = Counter(); newest_rank = Counter(); best = 0
for arch, name, d in all_runs():
    r = load(d, name); b = anchor(r); nl, nf = phase_split(r)
    segs = r[".segments.json"]["segments"]
    pool, p2, p8 = driver_maps(r, b)
    j = prelaunch(segs, nl, nf, pool, b)
    st = State(b)
    for s in segs[:nl]: st.add(s[2], s[3])
    inv_at = rule2(st.holes(), 2 * MIB); st.segs.append((inv_at, inv_at + 2 * MIB))
    for s in segs[nl:nl + j]: st.add(s[2], s[3])
    hs = st.holes()
    h = next(h for h in hs if h[0] <= p8[0] < h[1])
    fit = [x for x in hs if x[1] - x[0] >= SZ]
    smallest = min(x[1] - x[0] for x in fit)
    best += (h[1] - h[0]) == smallest
    sizes[(h[1] - h[0]) // MIB] += 1
    order = sorted({x[2][2] for x in fit}, reverse=True)
    newest_rank[order.index(h[2][2])] += 1
    print(f"  {arch:4} {name[:44]:44} hole {mib(h[0],b):+.0f}..{mib(h[1],b):+.0f} ({(h[1]-h[0])/MIB:.0f} MiB), "
          f"pinned at its low end: {h[0] == p8[0]}, fitting holes: {len(fit)}, smallest fitting {smallest/MIB:.0f} MiB")
print(f"  hole sizes (MiB): {dict(sizes)}; rank of its chunk among chunks with a fitting hole (0 = newest): {dict(newest_rank)}; "
      f"hole is a smallest fitting one: {best}/25")
