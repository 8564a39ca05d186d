"""One try of a `vramscope plan` workload on the GPU, shared by plan_bisect.py and plan_repeat.py.

A try is a fresh process, `hf_cases.py CASES CASE /tmp --batch B --limit-bytes L --quiet`, that runs
the whole workload under `set_per_process_memory_fraction` and exits 0 when every step completes,
3 on out-of-memory. `run_try` returns its exit code, the JSON record it printed last (None if it
printed none) and its stderr.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def cases_path():
    """The workload list: $CASES, else validation/hf_cases.json."""
    return os.environ.get("CASES", os.path.join(HERE, "hf_cases.json"))


def last_json(stdout):
    """The last line of `stdout` that parses as JSON, or None."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def run_try(case, batch, limit_bytes, no_aslr=False):
    """Run one try; `no_aslr` runs it under `setarch -R` (address-space randomisation off)."""
    cmd = [sys.executable, os.path.join(HERE, "hf_cases.py"), cases_path(), case, "/tmp",
           "--batch", str(batch), "--quiet"]
    if limit_bytes is not None:  # None: the whole card, no fraction set
        cmd += ["--limit-bytes", str(limit_bytes)]
    if no_aslr:
        cmd = ["setarch", os.uname().machine, "-R"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, last_json(r.stdout), r.stderr
