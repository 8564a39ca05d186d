"""Find the real largest batch of a workload on the GPU, for `vramscope plan`'s fixtures.

    python3 plan_bisect.py PLAN_CASES.json NAME OUTDIR

PLAN_CASES.json (validation/plan_cases.json) names a workload of hf_cases.json (`case`) and the
memory limit (`limit_bytes`), applied exactly as `torch.cuda.set_per_process_memory_fraction(
limit_bytes / total_memory)`. PyTorch turns the fraction back into bytes as
`allowed_memory_maximum = static_cast<size_t>(fraction * total)` (CUDACachingAllocator.cpp,
`setMemoryFraction`), which can be `limit_bytes - 1` through rounding: the record keeps
`total_memory`, `fraction` and that `allowed_bytes` so that the twin can apply the same limit.
`limit_bytes` null means the whole card: no fraction is set, so what decides is the device's own
memory (`cudaMalloc` failing), less what the CUDA context and the driver hold; only one such
bisection may run on a GPU at a time (PLAN_JOBS=1). An optional `from` starts the doubling at that
batch instead of 1.

Every try is a fresh process (`hf_cases.py ... --batch B --limit-bytes L --quiet`) that runs the
whole workload (every step) and exits 0, or 3 on out-of-memory; any other exit stops the search
(the record is still written, with `error`). The search is the one `vramscope plan` documents:
batch 1, 2, 4, ... doubling until a try fails (at most 2^15), then bisection between the last
success and the first failure; `confirm_next_fits` is the result of batch max_batch + 1 (taken
from the search when it was tried there, else tried once more): False when the boundary is clean.
If batch 1 fails, max_batch is 0; `capped` says no batch up to 2^15 failed. Writes
OUTDIR/NAME.plan.json (rewritten after every try, so an interrupted search leaves what it had)
with every try's phases or error and its wall time.
"""
import json
import os
import subprocess
import sys
import time

from plan_try import run_try

MAX_BATCH = 1 << 15  # the twin's MAX_BATCH_CAP (crates/planner/src/search.rs says why)


def main():
    plans_path, name, outdir = sys.argv[1:4]
    plan = next((p for p in json.load(open(plans_path)) if p.get("name", p["case"]) == name), None)
    if plan is None:
        raise SystemExit(f"no plan case named {name!r} in {plans_path}")
    limit = plan["limit_bytes"]
    os.makedirs(outdir, exist_ok=True)
    t0 = time.time()
    # The GPU's total memory, as hf_cases.py reads it, to record the exact limit PyTorch applies.
    r = subprocess.run([sys.executable, "-c", "import torch;print(torch.cuda.get_device_properties(0).total_memory)"],
                       capture_output=True, text=True)
    total = int(r.stdout.strip()) if r.returncode == 0 and r.stdout.strip().isdigit() else None
    # limit_bytes null: the whole card, no fraction set (what `vramscope plan --gpu` means)
    fraction = limit / total if total and limit is not None else None
    rec = dict(name=name, case=plan["case"], limit_bytes=limit, total_memory=total, fraction=fraction,
               allowed_bytes=int(fraction * total) if fraction is not None else None, max_batch=None,
               confirm_next_fits=None, n_tries=0, wall_s=None, tries=[])
    tries = rec["tries"]
    results = {}

    def save():
        rec["n_tries"] = len(tries)
        rec["wall_s"] = round(time.time() - t0, 1)
        with open(os.path.join(outdir, name + ".plan.json"), "w") as f:
            json.dump(rec, f, indent=1)
            f.write("\n")

    def ok(b):
        t = time.time()
        rc, out, stderr = run_try(plan["case"], b, limit)
        t = round(time.time() - t, 1)
        if rc not in (0, 3) or out is None:
            out = dict(name=plan["case"], batch=b, ok=False, crash=stderr[-2000:])
        out["rc"] = rc
        out["wall_s"] = t
        tries.append(out)
        save()
        if rc not in (0, 3):
            rec["error"] = f"try batch={b} exited {rc}"
            save()
            raise SystemExit(f"{name}: try batch={b} exited {rc}: {stderr[-2000:]}")
        results[b] = rc == 0
        return results[b]

    lo, hi = 0, None
    # `from` (optional) starts the doubling there instead of at 1: fewer tries where each try
    # takes long (a whole card); the answer is the same wherever the boundary is monotone
    b = plan.get("from", 1)
    while b <= MAX_BATCH:
        if ok(b):
            lo = b
            b *= 2
        else:
            hi = b
            break
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(mid):
                lo = mid
            else:
                hi = mid
    rec["max_batch"] = lo
    rec["capped"] = hi is None  # every batch up to MAX_BATCH fitted: the limit is too loose
    rec["confirm_next_fits"] = results[lo + 1] if lo + 1 in results else ok(lo + 1)
    save()
    print(f"{name}: max_batch={lo} next_fits={rec['confirm_next_fits']} tries={len(tries)} wall={rec['wall_s']}s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
