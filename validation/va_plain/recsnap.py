"""record.py, plus at the very end (after its "end" line) the allocator's segments
(torch.cuda.memory_snapshot(): address, size, blocks) and /proc/self/maps, to $SNAP_JSON.
No history: the process is the record run's."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "run"))
import record

_emit = record._emit


def emit(phase, device=None, exception=None):
    _emit(phase, device, exception)
    if phase == "end":
        torch = record._state["torch"]
        out = {"segments": [], "maps": open("/proc/self/maps").read()}
        if torch is not None and torch.cuda.is_initialized():
            for s in torch.cuda.memory_snapshot():
                out["segments"].append(
                    [
                        s["address"],
                        s["total_size"],
                        s["stream"],
                        s.get("segment_type"),
                        [[b["size"], b.get("requested_size", 0), b["state"]] for b in s["blocks"]],
                    ]
                )
        with open(os.environ["SNAP_JSON"], "w") as f:
            json.dump(out, f)


record._emit = emit
if __name__ == "__main__":
    record.main()
