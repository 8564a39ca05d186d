"""Session 78 probe (helper mw): where blind303/kr04's H100 process puts the driver's 8.25 MiB
device-side-assert buffer (driver-placement rule 19) and the segments made around it.

    OUT=DIR python3 probes/mw78_kr04_assert_buffer_probe.py        (from validation/run; < 90 s, < 4 GB)

Why: rule 19 (commit 192d6cd3) moved kr04's answers from 6 of 6 phases exact to 2 of 6 (reserved
-4,194,304 from phase 2 on). In the twin the buffer is mapped at the teacher's first `embedding` (the op
that also gives the context's range back and makes the driver's pool) into the 16 MiB hole at the top of
the newest chunk (the teacher's last 36 MiB weight segment's chunk, with the embedding's 12 MiB output
below the hole); without the rule, the next 2 MiB segment and the next 12 MiB segment fill that hole.
This probe runs kr04 unchanged under `validation/va_run_maps.py` (the process's maps after every op, up
to MAX_OPS, and the memory history's segment events), then prints each op that mapped `/dev/zero`
page-locked memory or a range of 512 MiB or more, and the first 120 segment events (about 40 in phases
0-1, then phase 2's after `empty_cache`), each with its offset in MiB from the 8.25 MiB mapping's start.
The twin's lines, with and without rule 19, are in mw78_kr04_assert_buffer_probe_twin_h100.out.
"""

import json
import os
import pathlib
import subprocess
import sys

here = pathlib.Path(__file__).resolve().parent.parent
script = next((here / "blind303").glob("kr04_*.py"))
out = pathlib.Path(os.environ.get("OUT", "/tmp"))
out.mkdir(parents=True, exist_ok=True)
prefix = str(out / "kr04")
env = dict(os.environ, OUT=prefix, MAX_OPS=os.environ.get("MAX_OPS", "20000"))
# SIGTERM at the time limit: va_run_maps.py still writes what it recorded
p = subprocess.Popen(
    [sys.executable, str(here.parent / "va_run_maps.py"), str(script)],
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
)
try:
    stdout, stderr = p.communicate(timeout=int(os.environ.get("SEC", "80")))
except subprocess.TimeoutExpired:
    p.terminate()
    stdout, stderr = p.communicate()
r = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
print("kr04 rc", r.returncode)
print(r.stdout[-2000:])
print(r.stderr[-2000:], file=sys.stderr)
maps = json.load(open(prefix + ".maps.json"))
trace = json.load(open(prefix + ".trace.json"))
buf = None
for k, name, segs, added, _removed in maps["stops"]:
    big = [m for m in added if m[1] - m[0] >= 512 << 20]
    zero = [m for m in added if "zero" in m[3]]
    if big or zero:
        print(f"op {k} {name} segments {segs}")
        for a, b, perms, path in big + zero:
            print(f"  + {a:#x}-{b:#x} {(b - a) / 2**20:.3f} MiB {perms} {path}")
            if buf is None and "zero" in path and abs((b - a) - 8_650_752) < (1 << 20):
                buf = (a, k)
if buf is None:
    print("no 8.25 MiB /dev/zero mapping seen")
    sys.exit(0)
print(f"the 8.25 MiB buffer at {buf[0]:#x}, op {buf[1]}; segment events, offsets from it (MiB):")
n = 0
for i, (action, addr, size) in enumerate(trace):
    if action.startswith("segment"):
        print(f"  {i} {action} {(addr - buf[0]) / 2**20:+.2f} {size / 2**20:.2f}")
        n += 1
        if n >= 120:
            break
