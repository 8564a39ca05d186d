"""Shared readers of the forward0 driver-pool analysis (validation/va_pool/README.md)."""
import json, glob, os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
# the archives of fixtures/va_maps unpacked here (run_all.sh does it)
DATA = os.environ.get("VA_POOL_DATA", "/tmp/va_pool_data")
import va_check as vc
MIB = 1 << 20
CH = 32 * MIB

def all_runs():
    """(archive, name, dir) for every run with op stops: mlog 8, ops2 12, maps/ops 5."""
    out = []
    for arch, sub in (("mlog", "mlog/mlog"), ("ops2", "ops2/ops"), ("maps", "maps/ops")):
        for f in sorted(glob.glob(f"{DATA}/{sub}/*.maps.json")):
            name = os.path.basename(f)[:-len(".maps.json")]
            out.append((arch, name, os.path.dirname(f)))
    return out

def load(d, name):
    r = {}
    for s in (".maps.json", ".segments.json", ".json"):
        r[s] = json.load(open(os.path.join(d, name + s)))
    p = os.path.join(d, name + ".mlog")
    r[".mlog"] = open(p).read() if os.path.exists(p) else None
    return r

def phase_split(r):
    """number of load segments, index after forward0's last segment (no frees in these traces)"""
    segs = r[".segments.json"]["segments"]
    ph = {p["name"]: p["reserved_bytes"] for p in r[".json"]["phases"]}
    c, nl, nf = 0, None, None
    for i, x in enumerate(segs):
        assert x[1] == "segment_alloc"
        c += x[3]
        if c == ph["load"] and nl is None: nl = i + 1
        if c == ph["forward0"]: nf = i + 1
    return nl, nf

def anchor(r):
    segs = r[".segments.json"]["segments"]
    return max(s[2] for s in segs[:10] if s[3] == 20 * MIB) - 72 * MIB

def chunk_of(a, size):
    c0 = a // CH * CH
    return c0, c0 + (a - c0 + size + CH - 1) // CH * CH

def mib(x, b):
    return (x - b) / MIB

def parse_maps(text):
    out = []
    for line in text.splitlines():
        f = line.split(None, 5)
        a, c = (int(x, 16) for x in f[0].split("-"))
        out.append((a, c, f[1], f[5] if len(f) > 5 else ""))
    return out

def first_op(r):
    """index of the end-load stop, index of the first stop after it that maps or unmaps anything"""
    stops = r[".maps.json"]["stops"]
    i0 = next(i for i, x in enumerate(stops) if x["label"] == "end load")
    k = next(k for k in range(i0 + 1, len(stops)) if stops[k]["added"] or stops[k]["removed"])
    return i0, k

def driver_maps(r, b):
    """pool (lo, hi), pinned2 (lo, hi), pinned8 (lo, hi) from the first op stop's added mappings"""
    stops = r[".maps.json"]["stops"]
    i0, k = first_op(r)
    add = stops[k]["added"]
    z = sorted((a, c) for a, c, p, path in add if path.startswith("/dev/zero"))
    two = [x for x in z if x[1] - x[0] == 2 * MIB]
    eight = [x for x in z if x[1] - x[0] == 8654848]
    assert len(two) == 1 and len(eight) == 1, (two, eight)
    r504 = [(a, c) for a, c, p, path in add if p == "---p" and not path and c - a == 504 * MIB and c == two[0][0]]
    assert len(r504) == 1
    return (r504[0][0], r504[0][0] + 512 * MIB), two[0], eight[0]

class State:
    """segment chunks rebuilt from the trace. The context's range [B-416, B+102) is not a chunk;
    its holes B-2..B and B+72..B+96 are listed as context holes."""
    def __init__(self, b):
        self.b = b
        self.chunks = []   # [lo, hi, order, kind]
        self.segs = []     # (lo, hi)
        self.n = 0
    def add(self, a, size):
        b = self.b
        self.segs.append((a, a + size))
        if any(c[0] <= a < c[1] for c in self.chunks):
            return "hole"
        if b - 416 * MIB <= a < b + 102 * MIB and not getattr(self, "released", False):
            return "context"
        c0, c1 = chunk_of(a, size)
        self.n += 1
        self.chunks.append([c0, c1, self.n, "seg"])
        return "chunk"
    def add_chunk(self, lo, hi, kind):
        self.n += 1
        self.chunks.append([lo, hi, self.n, kind])
    def holes(self):
        """(lo, hi, chunk) of each free part of each chunk (2 MiB granular)"""
        return holes_of(self.chunks, self.segs + getattr(self, "pinned", []))

def holes_of(chunks, occ):
    """(lo, hi, chunk) of each part of each chunk that no range of `occ` covers (2 MiB granular)"""
    out = []
    for c in chunks:
        lo, hi = c[0], c[1]
        cov = sorted((max(s0, lo), min(s1, hi)) for s0, s1 in occ if s0 < hi and s1 > lo)
        at = lo
        for s0, s1 in cov:
            s0 = s0 // (2 * MIB) * (2 * MIB)
            if s0 > at: out.append((at, s0, c))
            at = max(at, -(-s1 // (2 * MIB)) * (2 * MIB))
        if at < hi: out.append((at, hi, c))
    return out

def prelaunch(segs, nl, nf, pool, b):
    """forward0's leading segments that lie neither in the pool nor in the context's range
    [B-416, B+102): taken as allocated before the first op's launch (before the pool exists)"""
    j = 0
    for s in segs[nl:nf]:
        if pool[0] <= s[2] < pool[1] or b - 416 * MIB <= s[2] < b + 102 * MIB:
            break
        j += 1
    return j

def rule2(holes, size, top=False):
    """newest chunk with a hole >= size, best fit inside it (lowest address among ties), low end"""
    fit = [h for h in holes if h[1] - h[0] >= size]
    if not fit: return None
    newest = max(h[2][2] for h in fit)
    h = min((h for h in fit if h[2][2] == newest), key=lambda h: (h[1] - h[0], h[0]))
    return h[1] - size if top else h[0]

def bestfit(holes, size, high=False):
    fit = [h for h in holes if h[1] - h[0] >= size]
    if not fit: return None
    h = min(fit, key=lambda h: (h[1] - h[0], -h[0] if high else h[0]))
    return h[0]
