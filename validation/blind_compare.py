"""Score a blind set's answers against what the GPU recorded.

    python3 validation/blind_compare.py fixtures/unseen/SET

Reads `answers.txt` (one line per version and workload: VERSION NAME then
PHASE:allocated:peak_allocated:reserved:peak_reserved) and each workload's recorded
`NAME.json` (`hf_cases.py`'s figures). For each version: phases where all four figures are
the GPU's, workloads exact in every phase, and the workloads outside issue #5's tolerance
(a phase's peak allocated more than 0.5% or peak reserved more than 2% from the GPU's),
with the worst error of each. A workload PyTorch refused (`NAME.refused.txt`, the end of its
traceback, where `NAME.json` would be) counts as answered right when the twin refused it too (its
line `VERSION NAME ERR ...`), and is listed otherwise. Python 3's standard library only.
"""
import json, os, sys

d = sys.argv[1]
ans = {}
for line in open(os.path.join(d, "answers.txt")):
    if line.startswith("#") or not line.strip():
        continue
    v, name, *ph = line.split()
    ans.setdefault(v, {})[name] = None if ph[:1] == ["ERR"] else {
        p.split(":")[0]: [int(x) for x in p.split(":")[1:]] for p in ph}
for v, per in ans.items():
    exact = total = whole = 0
    outside, refused = [], []
    for name, twin in sorted(per.items()):
        if os.path.exists(os.path.join(d, name + ".refused.txt")):
            refused.append(f"{name} ({'refused by the twin too' if twin is None else 'the twin answered'})")
            continue
        if twin is None:
            outside.append(f"{name} (refused by the twin, run by PyTorch)")
            continue
        gpu = {p["name"]: [p["allocated_bytes"], p["peak_allocated_bytes"], p["reserved_bytes"],
                           p["peak_reserved_bytes"]] for p in json.load(open(os.path.join(d, name + ".json")))["phases"]}
        ok = worst_a = worst_r = 0
        for ph, g in gpu.items():
            t = twin.get(ph)
            total += 1
            if t == g:
                ok += 1
            if t is None:
                worst_a = worst_r = float("inf")
                continue
            worst_a = max(worst_a, abs(t[1] - g[1]) / g[1] * 100 if g[1] else 0)
            worst_r = max(worst_r, abs(t[3] - g[3]) / g[3] * 100 if g[3] else 0)
        exact += ok
        whole += ok == len(gpu)
        if worst_a > 0.5 or worst_r > 2:
            outside.append(f"{name} ({worst_a:.3f}% allocated, {worst_r:.3f}% reserved)")
    print(f"{v}: {exact} of {total} phases exact, {whole} of {len(per) - len(refused)} workloads exact in "
          f"every phase, {len(outside)} outside the tolerance" + "".join(f"\n    {o}" for o in outside)
          + "".join(f"\n    refused by PyTorch: {r}" for r in refused))
