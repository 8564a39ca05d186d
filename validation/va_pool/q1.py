"""Q1: the driver's pool at the first op of forward0, every run.
Checks: size 512 MiB (mlog: the M/U lines; maps: a new 504 MiB ---p + 2 MiB /dev/zero + 6 MiB merged
into the chunk above), top == start of the lowest mapping at the `end load` stop, 2 MiB /dev/zero at
top - 8 MiB, and Linux top-down placement: highest 32 MiB aligned 512 MiB in the highest gap
>= 544 MiB - 4 KiB below B + 1 GiB (gaps from the end-load maps, less what the same op unmapped)."""
from common import *
CEIL = 1024 * MIB
res = {}
def count(k, ok): res.setdefault(k, [0, 0])[0 if ok else 1] += 1
for arch, name, d in all_runs():
    r = load(d, name); b = anchor(r)
    stops = r[".maps.json"]["stops"]; i0, k = first_op(r)
    pool, p2, p8 = driver_maps(r, b)
    occ = [(a, c) for a, c, _, _ in parse_maps(stops[i0]["maps"])]
    before = set(occ)
    # 512: the new parts of the stop from pool_lo to pool_hi are all new
    new = vc.new_parts(stops[k])
    covered = sum(min(hi, pool[1]) - max(lo, pool[0]) for lo, hi, _, _ in new if lo < pool[1] and hi > pool[0])
    old_in_pool = any(a < pool[1] and c > pool[0] for a, c in occ)
    mlog_len = None
    if r[".mlog"]:
        lines = r[".mlog"].split("# end load", 1)[1].splitlines()
        ms = [l.split() for l in lines if l.startswith("M ") and int(l.split()[2]) == 570421248]
        us = [l.split() for l in lines if l.startswith("U ") and ms and l.split()[1] == ms[0][1]]
        a = int(ms[0][1], 16); kept = (a + int(us[0][2]), a + int(ms[0][2]))
        mlog_len = kept
        count("mlog: M 544MiB-4KiB, U first 32MiB-4KiB, kept == pool", kept == pool)
    lowest = min(a for a, c in occ if a > b - 200000 * MIB)
    # lowest mapping overall that is below B (chunks or host mappings)
    lowest_chunk = min(a for a, c, p, path in parse_maps(stops[i0]["maps"]) if p == "---p" and not path and b - 200000 * MIB < a < b)
    count("pool is 512 MiB, all new", covered == 512 * MIB and not old_in_pool)
    count("pool top == lowest ---p chunk at end load", pool[1] == lowest_chunk)
    count("pool top == lowest mapping of any kind at end load", pool[1] == lowest)
    count("2 MiB /dev/zero at pool top - 8 MiB", p2[0] == pool[1] - 8 * MIB)
    # top-down rule
    rem = [(a, c) for a, c, _, _ in stops[k]["removed"]]
    occ2 = list(occ)
    # the same op's unmaps that give a range back: the context's U of B-416..B (when it happens)
    for a, c, _, _ in stops[k]["removed"]:
        occ2.remove((a, c))
        # what of it is still mapped after the stop
        for a2, c2, _, _ in parse_maps(stops[k]["maps"]) if "maps" in stops[k] else []:
            pass
    after = [(a, c) for a, c, _, _ in stops[k]["added"]]
    # keep of the removed ones only what the stop still has mapped, but none of the pool itself:
    occ2 += [(a, c) for a, c in after if c <= pool[0] or a >= pool[1]]
    occ2 += [(max(a, pool[1]), c) for a, c in after if a < pool[1] < c]
    iv = sorted(occ2)
    gaps = sorted(((x1, y0) for (_, x1), (y0, _) in zip(iv, iv[1:]) if y0 > x1 and y0 <= b + CEIL), key=lambda g: -g[1])
    g = next(((lo, hi) for lo, hi in gaps if hi - lo >= 544 * MIB - 4096), None)
    pred = ((g[1] - 512 * MIB) // CH * CH) if g else None
    count("top-down: highest gap >= 544MiB-4KiB below B+1GiB", pred == pool[0])
    bigger = [(lo, hi) for lo, hi in gaps if hi - lo >= 544 * MIB - 4096 and hi > pool[1]]
    above = [hi - lo for lo, hi in gaps if hi > pool[1]]
    count("no gap >= 544 MiB between the pool and B+1GiB (the two rules agree)", not bigger)
    rel = [(mib(a, b), mib(c, b)) for a, c in rem if a < b]
    print(f"{arch:4} {name[:44]:44} pool {mib(pool[0],b):+7.0f}..{mib(pool[1],b):+7.0f} "
          f"lowest chunk {mib(lowest_chunk,b):+7.0f} lowest map {mib(lowest,b):+7.0f} pin2 top-{(pool[1]-p2[0])/MIB:.0f} "
          f"topdown {'ok' if pred == pool[0] else 'MISS ' + str(pred and mib(pred, b))} largest gap above the pool (below B+1GiB) {max(above)/MIB:.1f} MiB")
for k2, (ok, bad) in res.items(): print(f"  {k2}: {ok}/{ok+bad}")
