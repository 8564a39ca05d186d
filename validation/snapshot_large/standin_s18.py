"""A stand-in for record.py without a GPU (a dry run of bench_s18.sh): writes a
gen_snapshot file of about --target-mb / DRYSCALE MB with the arguments' shape."""

import argparse
import json
import os
import subprocess

p = argparse.ArgumentParser()
p.add_argument("--out")
p.add_argument("--target-mb", type=float)
p.add_argument("--wrap", action="store_true")
p.add_argument("--wrap-ratio", type=float, default=2.0)
p.add_argument("--streams", type=int, default=1)
p.add_argument("--oom-at", type=float)
p.add_argument("--stacks")
p.add_argument("--depth", type=int)
p.add_argument("--max-seconds", type=float)
a = p.parse_args()
n = int(a.target_mb * 1e6 / 150 / float(os.environ.get("DRYSCALE", "100")))
cmd = [os.environ["GEN"], "--entries", str(int(n * (a.wrap_ratio if a.wrap else 1))), "--out", a.out]
if a.wrap:
    cmd += ["--max-entries", str(n), "--streams", str(a.streams), "--conf", "expandable_segments:True"]
subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
print(json.dumps({"out": a.out, "standin": cmd}))
