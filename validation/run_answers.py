"""The twin's answers for the validation scripts of validation/run/: each script
under `vramscope run` in a fresh process, one JSON line per phase, in the schema
record.py writes on the GPU.

    python validation/run_answers.py OUT.jsonl [SCRIPT ...]
    GPU=h200 python validation/run_answers.py OUT.jsonl [SCRIPT ...]     (`vramscope run --gpu h200`)

Written before the GPU runs a new script (blind), then compared with
validation/run_compare.py.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")
KEYS = ("allocated", "peak_allocated", "reserved", "peak_reserved", "requested")


def scripts():
    return sorted(p for p in glob.glob(os.path.join(HERE, "[0-9][0-9]_*.py")))


def answer(path, args=(), cwd=HERE, name=None, log=None, options=()):
    """The twin's lines for `path` run with `args` from `cwd` under the name `name` (the file's stem
    by default), `options` given to `vramscope run` (`--nproc 2`); `log`, a path prefix, keeps the
    run's stdout and stderr (LOG.out, LOG.err)."""
    name = name or os.path.splitext(os.path.basename(path))[0]
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        env = {k: v for k, v in os.environ.items() if k not in ("SMOKE", "PYTORCH_CUDA_ALLOC_CONF")}
        run = [sys.executable, "-m", "vramscope", "run", "--gpu", os.environ.get("GPU", "h100"), "--quiet"]
        try:
            p = subprocess.run(
                [*run, *options, "--json", report, path, *args],
                cwd=cwd,
                capture_output=True,
                text=True,
                env=env,
                timeout=900,
            )
        except subprocess.TimeoutExpired as e:
            return [{"script": name, "phase": "end", "exit": 124, "error": f"timed out after {e.timeout} s"}]
        if log:
            for ext, text in ((".out", p.stdout), (".err", p.stderr)):
                with open(log + ext, "w") as f:
                    f.write(text)
        lines = []
        if os.path.exists(report):
            r = json.load(open(report))
            for ph in r["phases"]:
                rec = {"script": name, "phase": ph["name"]}
                rec.update({k: ph[k] for k in KEYS})
                rec["exit"] = p.returncode
                rec["unmeasured"] = r["unmeasured"]
                lines.append(rec)
        else:
            lines.append({"script": name, "phase": "end", "exit": p.returncode, "error": p.stderr[-2000:]})
        return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", metavar="OUT.jsonl", help="where the answers go, one JSON line per phase")
    ap.add_argument("scripts", metavar="SCRIPT", nargs="*", help="default: validation/run/NN_*.py")
    ap.add_argument("-j", "--workers", type=int, default=2, help="scripts answered at once (default 2)")
    a = ap.parse_args()
    out = a.out
    todo = [
        os.path.abspath(s) if os.path.exists(s) else os.path.join(HERE, s) for s in a.scripts
    ] or scripts()
    with ThreadPoolExecutor(max_workers=a.workers) as ex:
        results = list(ex.map(answer, todo))
    with open(out, "w") as f:
        for lines in results:
            for rec in lines:
                f.write(json.dumps(rec) + "\n")
    for lines in results:
        last = lines[-1]
        print(last["script"], "exit", last["exit"], "phases", len(lines), last.get("error", "")[-300:])


if __name__ == "__main__":
    main()
