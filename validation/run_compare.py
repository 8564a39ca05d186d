"""Compare the twin's answers for validation/run/ with the GPU's recordings.

    python validation/run_compare.py fixtures/run/run_h100.jsonl fixtures/run/answers_h100.jsonl

One line per script: its phases, how many are exact in all five figures,
and the largest relative error of each phase's peak allocated and peak
reserved; then the totals against the acceptance tolerance (0.5% peak
allocated, 2% peak reserved).
"""

import json
import lzma
import os
import sys

KEYS = ("allocated", "peak_allocated", "reserved", "peak_reserved", "requested")
ALLOC_TOL, RESERVED_TOL = 0.005, 0.02


def fixture(path):
    """`path` itself, or its xz-compressed `path.xz` where only that is kept (the blind sets'
    answer files are stored compressed); None where neither is."""
    for p in (path, path + ".xz"):
        if os.path.exists(p):
            return p
    return None


def load(path):
    """Each script's phase records, in order. A GPU phase that ended before the script's first CUDA
    call (`record.py`'s "cuda not initialized" note: `reset_peak_memory_stats()` at the top of
    blind99/cu03) has no figures; the caching allocator holds nothing then, so they read as 0."""
    out = {}
    found = fixture(path) or path
    for line in lzma.open(found, "rt") if found.endswith(".xz") else open(found):
        r = json.loads(line)
        if "script" in r and "phase" in r:
            if str(r.get("note", "")).startswith("cuda not initialized"):
                r = r | {k: 0 for k in KEYS if r.get(k) is None}
            out.setdefault(r["script"], []).append(r)
    return out


def rel(a, b):
    if b == 0:
        return 0.0 if a == 0 else 1.0
    return abs(a - b) / b


def compare(gpu, twin):
    rows = []
    for script in sorted(gpu):
        g, t = gpu[script], twin.get(script, [])
        ok = len(g) == len(t) and all(x["phase"] == y["phase"] for x, y in zip(g, t, strict=False))
        if not ok or any(y.get("error") for y in t):
            rows.append((script, len(g), 0, None, None, "the twin's phases differ (or it failed)"))
            continue
        exact = sum(all(x[k] == y[k] for k in KEYS) for x, y in zip(g, t, strict=True))
        ea = max(rel(y["peak_allocated"], x["peak_allocated"]) for x, y in zip(g, t, strict=True))
        er = max(rel(y["peak_reserved"], x["peak_reserved"]) for x, y in zip(g, t, strict=True))
        rows.append((script, len(g), exact, ea, er, ""))
    return rows


def main():
    if fixture(sys.argv[1]) is None:
        # a blind set answered before its GPU run: nothing to compare yet
        sys.exit(f"{sys.argv[1]}: no GPU run recorded (a set answered blind awaits the GPU)")
    gpu, twin = load(sys.argv[1]), load(sys.argv[2])
    rows = compare(gpu, twin)
    print(f"{'script':<40} {'phases':>6} {'exact':>6} {'peak alloc err':>15} {'peak resv err':>14}")
    within = phases = exact = 0
    for script, n, ex, ea, er, note in rows:
        phases += n
        exact += ex
        if ea is None:
            print(f"{script:<40} {n:>6} {ex:>6} {'-':>15} {'-':>14}  {note}")
            continue
        good = ea <= ALLOC_TOL and er <= RESERVED_TOL
        within += good
        mark = "" if good else "  outside"
        print(f"{script:<40} {n:>6} {ex:>6} {100 * ea:>14.3f}% {100 * er:>13.3f}%{mark}")
    print(
        f"{len(rows)} scripts, {phases} phases: {exact} phases exact in all five figures; "
        f"{within} scripts within {100 * ALLOC_TOL}% peak allocated and {100 * RESERVED_TOL}% peak reserved"
    )


if __name__ == "__main__":
    main()
