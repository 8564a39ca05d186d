"""Session 79 (helper nb): blind339/mb05 (FSDP1 NO_SHARD on a world of one, fp16 MixedPrecision) with
every kernel launch blocking, to tell the timing of CUDA events from a missing rule.

    python3 probes/nb79_mb05_launch_blocking_probe.py        (from validation/run; ~1 min, < 16 GB)

The H100's history of mb05 (fixtures/run/history_mb05_s79_h100.pickle.xz) parts from the twin's at
the first forward's third BertLayer (entry 1570): FSDP frees the previous layer's `_mp_shard` (the
25,192,448-byte fp16 flat parameter, allocated on the pre-unshard stream) after
`_no_dispatch_record_stream(..., current_stream())` (`_free_low_precision_sharded_param`,
torch/distributed/fsdp/_flat_param.py), so its block goes back only when the event recorded on the
default stream has completed (`process_events` at each `malloc`, CUDACachingAllocator.cpp). On the
H100 that took 28 allocations (the GPU behind the CPU), and the next layer's shard took a new 26 MiB
segment; the twin completes such events by the next malloc (the GPU keeping up). 911 frees complete
later on the H100 than in the twin over the run; the history process ended 257,949,696 bytes
reserved over the twin, the recorded process 67,108,864 over (from phase 2).

With CUDA_LAUNCH_BLOCKING=1 every kernel has finished when its launch returns, so every event has
completed by the next malloc, as the twin takes it. The probe prints, as record.py would, the
figures at each `reset_peak_memory_stats` and at the end (`phaseN` / `end`: allocated,
peak_allocated, reserved, peak_reserved, requested), then from a memory history (no frames) the
count of frees whose completion came after a later allocation (`late frees`), the first five with
their sizes. Expected if timing is the whole difference: the twin's answer (reserved 14,745,075,712
from phase 2) and no late frees outside the backward's batch (those the twin has too).
"""

import glob
import os
import runpy
import sys

os.environ["CUDA_LAUNCH_BLOCKING"] = "1"

import torch

script = os.path.abspath(glob.glob("blind339/mb05_*.py")[0])
torch.cuda.memory._record_memory_history(context=None, max_entries=2_000_000)

phase = [0]
reset = torch.cuda.reset_peak_memory_stats


def figures(tag):
    s = torch.cuda.memory_stats()
    print(
        f"{tag}: allocated {s['allocated_bytes.all.current']} peak_allocated {s['allocated_bytes.all.peak']} "
        f"reserved {s['reserved_bytes.all.current']} peak_reserved {s['reserved_bytes.all.peak']} "
        f"requested {s['requested_bytes.all.current']}",
        flush=True,
    )


def reset_and_report(*args, **kwargs):
    figures(f"phase{phase[0]}")
    phase[0] += 1
    return reset(*args, **kwargs)


torch.cuda.reset_peak_memory_stats = reset_and_report
sys.argv = [script]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    figures("end")
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    pending, allocs, late = {}, 0, []
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            allocs += 1
        elif e["action"] == "free_requested":
            pending[e["addr"]] = (i, allocs, e["size"])
        elif e["action"] == "free_completed" and e["addr"] in pending:
            j, before, size = pending.pop(e["addr"])
            if allocs > before:
                late.append((j, i, allocs - before, size))
    print(f"late frees {len(late)} (of {len(trace)} trace entries)", flush=True)
    for j, i, n, size in late[:5]:
        print(f"  requested at {j}, completed at {i}, {n} allocations later, size {size}", flush=True)
