"""blind295/kj03 run unchanged but for a `torch.cuda.synchronize()` before every `Tensor.record_stream`
(session 67, helper kj). kj03's prefetcher calls `record_stream` at the start of each batch, after the
previous batch was dropped, so the sync makes every record_stream event complete before the next malloc
queries it: the GPU that keeps up, which the twin models. In the evaluation loop (no sync of its own) the
H100 held two batches pending at phase 2's end (requested -201,334,784 against the twin) and ended phase 3
62,914,560 bytes of reserved under the twin. If this run prints the twin's figures in every phase, both
misses are timing (record_stream frees completing later on the GPU, feeding the garbage collector's
choices); if phase 3 still differs, the collector's rule is.

    cd validation/run && python3 probes/kj67_kj03_synced_eval_record_stream_probe.py

Prints the script's own report lines and, at each of its phase ends, one line
`KJ67 phase N: allocated A peak_allocated P reserved R peak_reserved Q requested Q2`."""

import glob
import os
import runpy
import sys

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "garbage_collection_threshold:0.6"  # kj03's own, before torch
import torch

here = os.path.dirname(os.path.abspath(__file__))
script = glob.glob(os.path.join(here, "..", "blind295", "kj03_*.py"))[0]
record_stream = torch.Tensor.record_stream
reset = torch.cuda.reset_peak_memory_stats
phase = [0]


def synced_record_stream(self, stream):
    torch.cuda.synchronize()
    return record_stream(self, stream)


def reset_and_print(*args, **kwargs):
    s = torch.cuda.memory_stats()
    print(
        f"KJ67 phase {phase[0]}: allocated {s['allocated_bytes.all.current']} "
        f"peak_allocated {s['allocated_bytes.all.peak']} reserved {s['reserved_bytes.all.current']} "
        f"peak_reserved {s['reserved_bytes.all.peak']} requested {s['requested_bytes.all.current']}",
        flush=True,
    )
    phase[0] += 1
    return reset(*args, **kwargs)


torch.Tensor.record_stream = synced_record_stream
torch.cuda.reset_peak_memory_stats = reset_and_print
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
reset_and_print()
