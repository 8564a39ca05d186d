"""Q3 listing: forward0's segments inside the pool (size, offset from the pool's top), and the sizes of
forward0's segments outside it."""
from common import *
from collections import Counter
tot_in = tot = 0
for arch, name, d in all_runs():
    r = load(d, name); b = anchor(r); nl, nf = phase_split(r)
    segs = r[".segments.json"]["segments"]
    pool, p2, p8 = driver_maps(r, b)
    fw = segs[nl:nf]
    inside = [(i, s) for i, s in enumerate(fw) if pool[0] <= s[2] < pool[1]]
    outs = Counter(s[3] // MIB for s in fw if not pool[0] <= s[2] < pool[1])
    tot_in += len(inside); tot += len(fw)
    print(f"{arch:4} {name[:44]:44} {len(inside)}/{len(fw)} in pool: " +
          " ".join(f"#{i}:{s[3]/MIB:.0f}@top{(s[2]-pool[1])/MIB:+.0f}" for i, s in inside))
    print(f"      outside sizes MiB: {dict(sorted(outs.items()))}  (2 MiB outside: {outs.get(2,0)})")
print(f"all: {tot_in}/{tot} forward0 segments inside the pool")
