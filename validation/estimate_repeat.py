"""Does the GPU give an estimate workload the same figures every time? For issue #5's fixtures.

    python3 estimate_repeat.py CASES.json OUTFILE NAME [NAME ...] [--repeat N] [--jobs J]
                               [--no-aslr]

Runs each named workload N times, each run a fresh process exactly as `hf_cases.sh` records it
(`hf_cases.py CASES NAME DIR`), J at a time, and appends one JSON line per run to OUTFILE: name,
repeat, aslr, and each phase's figures (name, allocated, peak allocated, reserved, peak reserved)
or the error. `--no-aslr` runs each under `setarch -R` (address-space randomisation off).

The figures of a workload depend on where the CUDA driver puts the allocator's segments (best fit
breaks ties between equal-size blocks by address), and the driver's own allocations in a process
that launches kernels are not all the same from one process to the next: these lines show how
much a recorded fixture is one draw among several.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))


def one(cases, name, k, no_aslr):
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, os.path.join(HERE, "hf_cases.py"), cases, name, d]
        if no_aslr:
            cmd = ["setarch", os.uname().machine, "-R"] + cmd
        r = subprocess.run(cmd, capture_output=True, text=True)
        try:
            out = json.load(open(os.path.join(d, name + ".json")))
        except (OSError, ValueError):
            out = {}
    phases = [[p["name"], p["allocated_bytes"], p["peak_allocated_bytes"], p["reserved_bytes"],
               p["peak_reserved_bytes"]] for p in out.get("phases", [])]
    return dict(name=name, repeat=k, aslr=not no_aslr, rc=r.returncode, phases=phases,
                error=out.get("error"), stderr=r.stderr[-500:] if r.returncode else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("outfile")
    ap.add_argument("names", nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--no-aslr", action="store_true")
    a = ap.parse_args()
    cases = os.path.realpath(a.cases)
    jobs = [(n, k) for n in a.names for k in range(a.repeat)]
    with ThreadPoolExecutor(a.jobs) as ex, open(a.outfile, "a") as f:
        for rec in ex.map(lambda j: one(cases, j[0], j[1], a.no_aslr), jobs):
            f.write(json.dumps(rec) + "\n")
            f.flush()
            peaks = [p[2] for p in rec["phases"]]
            print(rec["name"], rec["repeat"], "aslr" if rec["aslr"] else "no-aslr", rec["rc"],
                  max(peaks) if peaks else None)


if __name__ == "__main__":
    main()
