"""Run a script under PyTorch's own estimator, MemTracker over FakeTensorMode, for the side-by-side table.

    python memtracker.py SCRIPT [ARGS...]        (one JSON line to $OUT_JSONL, default stdout)

This is how torch.distributed._tools.mem_tracker documents it: the whole script runs inside
`FakeTensorMode()` and `MemTracker()`, unmodified (no `track_external`: the script builds its own model
and optimizer inside the tracker). The line holds MemTracker's peak ("Total" of
`get_tracker_snapshot("peak")` on cuda:0), the wall seconds of the script under the tracker (not
counting `import torch`), and the exception that stopped it, if one did. With MEMTRACKER_SWAP=1 it first
sets `torch.__future__.set_swap_module_params_on_conversion(True)`, without which `model.cuda()` under
FakeTensorMode fails ("Couldn't swap").
"""

import json
import os
import runpy
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker  # noqa: E402

t_import = time.perf_counter() - t0


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    if os.environ.get("MEMTRACKER_SWAP"):
        # the one global switch that lets `.cuda()` / `.to()` replace parameters by fake tensors
        torch.__future__.set_swap_module_params_on_conversion(True)
    mt = MemTracker()
    exc = None
    t1 = time.perf_counter()
    try:
        with FakeTensorMode(), mt:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        exc = None if e.code in (0, None) else f"SystemExit({e.code})"
    except BaseException as e:
        exc = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    seconds = time.perf_counter() - t1
    peak = None
    try:
        snap = mt.get_tracker_snapshot("peak")
        for dev, stats in snap.items():
            if torch.device(dev).type == "cuda":
                peak = int(stats.get("Total", 0))
    except Exception as e:
        exc = exc or f"snapshot: {type(e).__name__}: {e}"
    rec = {
        "script": os.path.basename(script).removesuffix(".py"),
        "memtracker_peak": peak,
        "swap": bool(os.environ.get("MEMTRACKER_SWAP")),
        "seconds": round(seconds, 3),
        "import_seconds": round(t_import, 3),
        "exception": exc,
    }
    out = open(os.environ["OUT_JSONL"], "a") if os.environ.get("OUT_JSONL") else sys.stdout
    out.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
