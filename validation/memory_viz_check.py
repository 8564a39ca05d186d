"""PyTorch's own snapshot tools open a snapshot predicted by `vramscope
estimate --snapshot` (issue #5): pickle.load, torch.cuda._memory_viz's
trace_plot / segment_plot / memory / segments / trace, and the peaks its
trace replays to.

    python validation/memory_viz_check.py fixtures/predicted/gpt2_train_b1_s64.pickle [OUTDIR]

Prints one JSON line: the figures and which tool calls succeeded.
Needs torch (no GPU).
"""
import io
import json
import pickle
import sys
from contextlib import redirect_stdout

from torch.cuda import _memory_viz as mv

path = sys.argv[1]
out_dir = sys.argv[2] if len(sys.argv) > 2 else None
with open(path, "rb") as f:
    snap = pickle.load(f)

result = {"file": path, "keys": sorted(snap)}
trace = snap["device_traces"][0]
result["trace_entries"] = len(trace)
# replay the trace's alloc/free sizes as memory_viz's trace view does
alloc = peak = 0
sizes = {}
for e in trace:
    if e["action"] == "alloc":
        alloc += e["size"]
        sizes[e["addr"]] = e["size"]
        peak = max(peak, alloc)
    elif e["action"] == "free_completed":
        alloc -= sizes.pop(e["addr"], 0)
result["peak_requested_bytes_from_trace"] = peak
result["segments"] = len(snap["segments"])
result["reserved_at_end"] = sum(s["total_size"] for s in snap["segments"])

ok = {}
for name, fn in [
    ("trace_plot", lambda: mv.trace_plot(snap)),
    ("segment_plot", lambda: mv.segment_plot(snap)),
    ("memory", lambda: mv.memory(snap)),
    ("segments", lambda: mv.segments(snap)),
    ("compare", lambda: mv.compare(snap["segments"], snap["segments"])),
]:
    try:
        buf = io.StringIO()
        with redirect_stdout(buf):
            r = fn()
        text = r if isinstance(r, str) else buf.getvalue()
        ok[name] = len(text)
        if out_dir and name.endswith("_plot"):
            with open(f"{out_dir}/{name}.html", "w") as f:
                f.write(text)
    except Exception as e:  # report, do not stop: the line says which failed
        ok[name] = f"FAILED: {type(e).__name__}: {e}"
result["memory_viz"] = ok
try:
    buf = io.StringIO()
    with redirect_stdout(buf):
        mv.trace(snap)
    result["trace_text_lines"] = buf.getvalue().count("\n")
except Exception as e:
    result["trace_text_lines"] = f"FAILED: {type(e).__name__}: {e}"
print(json.dumps(result))
