"""Does the GPU give the same verdict at a batch size every time? For `vramscope plan`'s fixtures.

    python3 plan_repeat.py PLAN_CASES.json NAME OUTFILE --batches B1,B2,... [--repeat N] [--jobs J]
                           [--no-aslr]

Runs every batch of the list N times, each try a fresh process exactly as `plan_bisect.py` runs
one (`hf_cases.py ... --batch B --limit-bytes L --quiet`, exit 0 when every step completes, 3 on
out-of-memory), J at a time, and writes one JSON line per try to OUTFILE: name, batch, repeat,
aslr, rc, the phase of the out-of-memory and the peak reserved of each phase. `--no-aslr` runs
each try under `setarch -R` (address-space randomisation off), which makes the CUDA driver's
segment placement repeat from one process to the next.
"""
import argparse
import json
from concurrent.futures import ThreadPoolExecutor

from plan_try import run_try


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("plans")
    ap.add_argument("name")
    ap.add_argument("outfile")
    ap.add_argument("--batches", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--no-aslr", action="store_true")
    a = ap.parse_args()
    plan = next(p for p in json.load(open(a.plans)) if p.get("name", p["case"]) == a.name)

    def one(job):
        b, k = job
        rc, out, stderr = run_try(plan["case"], b, plan["limit_bytes"], no_aslr=a.no_aslr)
        err = (out or {}).get("error") or {}
        return dict(name=a.name, batch=b, repeat=k, aslr=not a.no_aslr, rc=rc,
                    oom_phase=err.get("phase"),
                    peak_reserved=[p["peak_reserved_bytes"] for p in (out or {}).get("phases", [])],
                    stderr=stderr[-500:] if rc not in (0, 3) else None)

    jobs = [(int(b), k) for b in a.batches.split(",") for k in range(a.repeat)]
    with ThreadPoolExecutor(a.jobs) as ex, open(a.outfile, "a") as f:
        for rec in ex.map(one, jobs):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            print(rec["batch"], rec["repeat"], "aslr" if rec["aslr"] else "no-aslr", rec["rc"], rec["oom_phase"])


if __name__ == "__main__":
    main()
