"""Probe (session 71, helper ll) for blind323/ll02 and ll03's first training step on the H100.
The twin's as-answered figures differ from the H100's there by block placement, not by a missing
tensor: ll03 (MarkupLM QA, NAdam) ends step 0 with 786,432 bytes more allocated in the twin (one more
3 MiB block holding a 2.25 MiB optimizer state: an unsplit remainder), ll02 (RoCBert adversarial
contrastive pretraining) ends it 1,398,784 bytes under and 32 MiB of reserved memory under. Runs the
blind script (`LL_SCRIPT=ll02` or `ll03`) up to the end of its first step (the model built, one step,
its `report`), with the allocator's memory history on (Python frames), then dumps the snapshot to
`$OUT/LL_SCRIPT_step0_h100.pickle` (or /tmp) for `block_diff.py` against the twin's, and prints the
allocated / reserved figures and every segment (size, offset from the first, in the order made):
lines the twin prints too. < 20 s, < 10 GB."""

import os
import pathlib

import torch

torch.cuda.memory._record_memory_history(max_entries=2000000, stacks="python")
name = os.environ.get("LL_SCRIPT", "ll02")
here = pathlib.Path(__file__).resolve().parent.parent
src = next((here / "blind323").glob(f"{name}_*.py"))
text = src.read_text()
end = 'report("pretrain1-2")' if name == "ll02" else 'report("steps1-2")'
text = text.split(end)[0].replace("for step in range(3):", "for step in range(1):", 1)
g = {"__name__": name, "__file__": str(src)}
exec(compile(text, str(src), "exec"), g)
torch.cuda.synchronize()
print(f"{name} step0 allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
trace = torch.cuda.memory._snapshot()["device_traces"]
segs = [e for e in trace[0] if e["action"] == "segment_alloc"]
first = segs[0]["addr"] if segs else 0
for k, e in enumerate(segs):
    print(f"{name} segment {k} size {e['size']} offset {e['addr'] - first}")
out = os.environ.get("OUT", "/tmp")
torch.cuda.memory._dump_snapshot(os.path.join(out, f"{name}_step0_{os.environ.get('LL_TAG', 'h100')}.pickle"))
