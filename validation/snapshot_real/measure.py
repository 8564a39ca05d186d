"""Run a command and print one JSON line: its wall seconds, user+sys CPU
seconds and peak RSS (bytes, from wait4's ru_maxrss), with a label.

    python3 measure.py LABEL CMD [ARGS...]
"""
import json
import os
import subprocess
import sys
import time

label, cmd = sys.argv[1], sys.argv[2:]
t = time.perf_counter()
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
_, status, ru = os.wait4(proc.pid, 0)
wall = time.perf_counter() - t
err = proc.stderr.read().decode(errors="replace")[-400:]
rc = os.waitstatus_to_exitcode(status)
print(json.dumps({"label": label, "cmd": " ".join(cmd), "rc": rc, "wall_s": round(wall, 3),
                  "cpu_s": round(ru.ru_utime + ru.ru_stime, 3), "rss_bytes": ru.ru_maxrss * 1024,
                  **({"stderr": err} if rc else {})}), flush=True)
