"""Q3/Q4: replay forward0's segments (and the driver's mappings) op by op and test placement rules.

Events, in this order:
  load's segments -> [inv0: 2 MiB driver allocation, no host mapping] -> forward0's pre-launch segments
  (common.prelaunch) -> pool (512 MiB; variant decides what of it is a chunk) + pinned 2 MiB at top-8
  -> pinned 8.25 MiB (as 10 MiB) -> the context's release (all but the Llama runs)
  -> forward0's segments in trace order; just before forward0's one 32 MiB segment (cuBLAS's workspace,
  the first cuBLAS call): the 64 MiB reservation (where the maps show it; Llama: predicted, none visible)
  and [invC: 2 MiB driver allocation]; each later visible /dev/zero 2 MiB mapping of forward0 is inserted
  just before the first segment whose new chunk shows at a later stop.
Every placement is predicted by rule 2 (newest chunk with a hole that fits, best fit inside it, lowest
address among ties, at its low end; 2 MiB granular), else "new chunk"; then put where the GPU put it.
A segment counts right when the prediction is its address, or "new chunk" and it lies in no chunk.
"""
from common import *

class Sim:
    def __init__(s, b):
        s.b = b; s.chunks = []; s.occ = []; s.n = 0
    def new_chunk(s, lo, hi, kind):
        s.n += 1; c = [lo, hi, s.n, kind]; s.chunks.append(c); return c
    def find(s, a):
        return next((c for c in s.chunks if c[0] <= a < c[1]), None)
    def predict(s, size, sizes_ok=None):
        hs = holes_of(s.chunks, s.occ)
        if getattr(s, "pool_max", None) is not None and size > s.pool_max:
            hs = [h for h in hs if h[2][3] != "pool"]
        if sizes_ok: hs = [h for h in hs if sizes_ok(h, size)]
        return rule2(hs, size)
    def put(s, a, size):
        """place at the GPU's address; a new chunk if it lies in none"""
        if s.find(a) is None:
            c0, c1 = chunk_of(a, size); s.new_chunk(c0, c1, "seg")
        s.occ.append((a, a + size))

def run_one(arch, name, d, variant, log=None, tally=None):
    r = load(d, name); b = anchor(r); nl, nf = phase_split(r)
    segs = r[".segments.json"]["segments"]; fw = segs[nl:nf]
    stops = r[".maps.json"]["stops"]; i0, k0 = first_op(r)
    i1 = next(i for i, x in enumerate(stops) if x["label"] == "end forward0")
    pool, p2, p8 = driver_maps(r, b)
    llama = not any(a <= b - 416 * MIB < c for a, c, _, _ in stops[k0]["removed"])
    S = Sim(b)
    S.pool_max = variant.get("pool_max")
    # the context: [B-416, B+102) one chunk, oldest; its holes B-2..B and B+72..B+96
    ctx = S.new_chunk(b - 416 * MIB, b + 102 * MIB, "ctx")
    ctx_own = [(b - 416 * MIB, b - 2 * MIB), (b, b + 72 * MIB), (b + 96 * MIB, b + 102 * MIB)]
    S.occ += ctx_own
    for s in segs[:nl]: S.put(s[2], s[3])
    inv = variant.get("inv", True)
    def place(kind, size, actual, rec=True):
        """predict, count, then put at the actual address (actual None: put at the prediction)"""
        got = S.predict(size, variant.get("sizes_ok"))
        at = actual if actual is not None else got
        ok = (got == actual) if actual is not None else None
        if actual is not None and got is None and S.find(actual) is None: ok = True
        if tally is not None and rec and actual is not None:
            tally.setdefault(kind, [0, 0])[0 if ok else 1] += 1
            if kind.startswith("seg"):
                sub = "seg:new-chunk" if S.find(actual) is None and not pool[0] <= actual < pool[1] else "seg:in-hole"
                tally.setdefault(sub, [0, 0])[0 if ok else 1] += 1
        if log is not None and (ok is False or variant.get("verbose")):
            log.append(f"    {kind:10} {size/MIB:5.0f} MiB at {'none fits' if at is None else f'{mib(at,b):+9.0f}'}  rule "
                       f"{'new chunk' if got is None else f'{mib(got,b):+.0f}'}{'' if ok in (True, None) else '  MISS'}"
                       + (f"  (pool top{(at-pool[1])/MIB:+.0f})" if at is not None and pool[0] <= at < pool[1] else ""))
        if at is None:
            return None
        if S.find(at) is None and not pool[0] <= at < pool[1]:
            c0, c1 = chunk_of(at, size); S.new_chunk(c0, c1, kind)
        S.occ.append((at, at + size))
        return at
    # --- first op
    if inv: place("inv0", 2 * MIB, None)
    j = prelaunch(segs, nl, nf, pool, b)
    for s in fw[:j]: place("seg", s[3], s[2])
    pv = variant["pool"]
    if pv == "whole": S.new_chunk(pool[0], pool[1], "pool")
    elif pv == "top8": S.new_chunk(pool[1] - 8 * MIB, pool[1], "pool")
    elif pv == "topN": S.new_chunk(pool[1] - variant["N"], pool[1], "pool")
    elif pv == "none": pass
    S.occ.append(p2)
    place("pin8.25", 10 * MIB, p8[0])
    if not llama:
        ctx[0] = b  # B-416..B given back
        S.occ.remove((b - 416 * MIB, b - 2 * MIB))
    else:
        S.occ.remove((b - 416 * MIB, b - 2 * MIB))  # the range becomes a hole of the context's chunk
    # --- visible driver mappings of forward0 after the first op
    chunkstop = {}
    events = {}  # stop -> list of (kind, lo, hi)
    for k in range(k0 + 1, i1 + 1):
        for lo, hi, p, path in stops[k]["added"]:
            if path.startswith("/dev/zero"):  # MAP_FIXED over a reservation: not in new_parts
                events.setdefault(k, []).append(("pin2", lo, hi))
        for lo, hi, p, path in vc.new_parts(stops[k]):
            if p == "---p" and not path:
                for s in fw:
                    if lo <= s[2] < hi and s[0] not in chunkstop: chunkstop[s[0]] = k
    resv = None
    for k in range(k0 + 1, i1 + 1):
        for lo, hi, p, path in vc.new_parts(stops[k]):
            if p == "---p" and not path:
                cov = sorted(chunk_of(s[2], s[3]) for s in fw if chunkstop.get(s[0]) == k)
                parts, at = [], lo
                for c0, c1 in cov:
                    if c0 > at and c0 < hi: parts.append((at, min(c0, hi)))
                    at = max(at, c1)
                if at < hi: parts.append((at, hi))
                for x in parts:
                    if x[1] - x[0] == 64 * MIB and resv is None: resv = (k, x[0], x[1])
    # where each visible event group (stop kk) goes among forward0's segments: "late" = just before the
    # first segment whose new chunk shows at a later stop; "early" = just after the last segment whose new
    # chunk shows at kk or before (hole and pool segments carry no stop: their order to the events is unknown)
    order = variant.get("evorder", "late")
    pos = {}
    for kk in sorted(events):
        if order == "late":
            pos[kk] = next((i for i in range(j, len(fw)) if chunkstop.get(fw[i][0], -1) > kk), len(fw))
        else:
            pos[kk] = max([i + 1 for i in range(j, len(fw)) if chunkstop.get(fw[i][0], 10**9) <= kk], default=j)
    ws_done = False
    for idx in range(j, len(fw) + 1):
        for kk in sorted(k2 for k2 in events if pos[k2] == idx):
            for kind, lo, hi in events[kk]:
                if variant.get("invD") and "cudnn" in stops[kk]["label"]:
                    for _ in range(variant.get("invD_n", 1)):
                        place("invD", variant["invD"], None)
                place(kind, hi - lo, lo)
        if idx == len(fw):
            break
        s = fw[idx]
        if s[3] == 32 * MIB and not ws_done:
            ws_done = True
            place("resv64", 64 * MIB, resv[1] if resv else None)
            if inv: place("invC", 2 * MIB, None)
        place("seg" + ("-pool" if pool[0] <= s[2] < pool[1] else ""), s[3], s[2])
    return b, pool

if __name__ == "__main__":
    variants = {
        "A pool whole 512 MiB is a chunk, no inv": {"pool": "whole", "inv": False},
        "B pool not a chunk, no inv": {"pool": "none", "inv": False},
        "C pool top 8 MiB is a chunk, no inv": {"pool": "top8", "inv": False},
        "D pool not a chunk, inv0+invC": {"pool": "none", "inv": True},
        "E pool whole 512 MiB is a chunk, inv0+invC": {"pool": "whole", "inv": True},
        "F pool top 8 MiB is a chunk, inv0+invC": {"pool": "top8", "inv": True},
        "H pool top 8 MiB is a chunk, inv0+invC, 4 x 2 MiB before cuDNN's pinned 2 MiB": {"pool": "top8", "inv": True, "invD": 2 * MIB, "invD_n": 4},
        "I pool top 8 MiB is a chunk, inv0+invC, 5 x 2 MiB before cuDNN's pinned 2 MiB": {"pool": "top8", "inv": True, "invD": 2 * MIB, "invD_n": 5},
        "J pool whole 512 MiB a chunk for requests <= 2 MiB only, inv0+invC, 4 x 2 MiB cuDNN": {"pool": "whole", "pool_max": 2 * MIB, "inv": True, "invD": 2 * MIB, "invD_n": 4},
        "K pool whole 512 MiB a chunk for requests <= 6 MiB only, inv0+invC, 4 x 2 MiB cuDNN": {"pool": "whole", "pool_max": 6 * MIB, "inv": True, "invD": 2 * MIB, "invD_n": 4},
        "L pool top 16 MiB a chunk, inv0+invC, 4 x 2 MiB cuDNN": {"pool": "topN", "N": 16 * MIB, "inv": True, "invD": 2 * MIB, "invD_n": 4},
        "M pool top 12 MiB a chunk, inv0+invC, 4 x 2 MiB cuDNN": {"pool": "topN", "N": 12 * MIB, "inv": True, "invD": 2 * MIB, "invD_n": 4},
        "N pool top 10 MiB a chunk, inv0+invC, 4 x 2 MiB cuDNN": {"pool": "topN", "N": 10 * MIB, "inv": True, "invD": 2 * MIB, "invD_n": 4},
        "G pool top 8 MiB is a chunk, inv0+invC, 8 MiB before cuDNN's pinned 2 MiB": {"pool": "top8", "inv": True, "invD": 8 * MIB},
    }
    want = sys.argv[1] if len(sys.argv) > 1 else None
    if os.environ.get("EVORDER"):
        for v in variants.values(): v["evorder"] = os.environ["EVORDER"]
    for vn, v in variants.items():
        if want and not vn.startswith(want): continue
        v = dict(v); v["verbose"] = bool(os.environ.get("VERBOSE"))
        tot = {}
        print("=== variant", vn)
        for arch, name, d in all_runs():
            t, log = {}, []
            run_one(arch, name, d, v, log, t)
            for kk, (a1, a2) in t.items():
                tot.setdefault(kk, [0, 0]); tot[kk][0] += a1; tot[kk][1] += a2
            if want:
                print(f"  {arch:4} {name[:44]:44} " + "  ".join(f"{kk} {a1}/{a1+a2}" for kk, (a1, a2) in sorted(t.items())))
                for l in log: print(l)
        print("  ALL: " + "  ".join(f"{kk} {a1}/{a1+a2}" for kk, (a1, a2) in sorted(tot.items())))
