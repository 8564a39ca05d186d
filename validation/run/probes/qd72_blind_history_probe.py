"""Session 72 probe (helper qd): a blind script's memory history on the GPU, for `block_diff.py`.

    python3 probes/qd72_blind_history_probe.py SCRIPT [STOP]     (from validation/run)

Runs SCRIPT (a blind script, unchanged: its source executed as `__main__`) with the caching allocator's
memory history on from its first line (every alloc/free/segment event, no stack traces), up to the first
line holding the text STOP (default: to its end), then prints `PREFIX stop allocated A reserved R` and
every segment in the order made (`PREFIX segment K size S offset O`, O from the first), and dumps the
snapshot to `$OUT/PREFIX_hist_h100.pickle` (or /tmp). The script's own phase lines print as they do.
The twin runs the same file (`vramscope run --gpu h100`), giving its pickle for
`python block_diff.py GPU.pickle TWIN.pickle` (and `--place`): where the first block differs.
Session 72's targets, whose misses are block placement with every request the GPU's:
- blind329/lr01 (reserved -4 MiB in phase 2, +2 MiB after: 2 MiB segments left after `empty_cache`);
- blind329/lr02 to its phase 2 (`tta_probs = `): allocated +786,432 from phase 2;
- blind328/lq05 (allocated +578,560 at phase 0's end, +912,896 after; requested exact);
- blind327/lp01's phase 0 (`report("loraga_init")`): the layout before the first packed step."""

import os
import pathlib
import sys

import torch

torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=3_000_000)
script = pathlib.Path(sys.argv[1]).resolve()
stop = sys.argv[2] if len(sys.argv) > 2 else None
prefix = script.name[:4]
text = script.read_text()
if stop is not None:
    k = text.index(stop)
    text = text[: text.rindex("\n", 0, k) + 1]
sys.argv = [str(script)]
g = {"__name__": "__main__", "__file__": str(script)}
exec(compile(text, str(script), "exec"), g)
torch.cuda.synchronize()
print(f"{prefix} stop allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
trace = torch.cuda.memory._snapshot()["device_traces"]
segs = [e for e in trace[0] if e["action"] == "segment_alloc"]
first = segs[0]["addr"] if segs else 0
for k, e in enumerate(segs):
    print(f"{prefix} segment {k} size {e['size']} offset {e['addr'] - first}")
out = os.environ.get("OUT", "/tmp")
torch.cuda.memory._dump_snapshot(
    os.path.join(out, f"{prefix}_hist_{os.environ.get('QD_TAG', 'h100')}.pickle")
)
