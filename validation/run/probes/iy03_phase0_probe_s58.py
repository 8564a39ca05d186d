"""GPU probe for blind258/iy03's phase-0 allocated (session 58; not run yet). The H200 reports
`memory_allocated()` 97,628,672 after the ViT is built, cast to bf16 and exported; the twin reports
96,199,168, with the same `requested` bytes (90,489,296), peak and reserved: the same tensors, placed in
other blocks, so 1,429,504 more bytes sit in unsplit remainders on the GPU (a large-pool block is kept
whole when its remainder is at most 1 MiB: CUDACachingAllocator.cpp `shouldSplit`).

Run: python validation/run/probes/iy03_phase0_probe_s58.py OUTDIR
Runs the script's first 66 lines (model, `.cuda().to(bf16)`, randn, export) under
`_record_memory_history`, then writes OUTDIR/iy03_phase0.pickle (the snapshot: every segment's address
and blocks, every alloc/free with its address) and prints each large segment's blocks, so the twin's
choices (`vramscope run --snapshot`) can be compared block by block."""

import os
import pickle
import runpy
import sys
import tempfile

import torch

out = sys.argv[1] if len(sys.argv) > 1 else "."
here = os.path.dirname(os.path.abspath(__file__))
script = next(
    os.path.join(here, "..", "blind258", f)
    for f in os.listdir(os.path.join(here, "..", "blind258"))
    if f.startswith("iy03")
)
head = "".join(open(script).readlines()[:66])
with tempfile.NamedTemporaryFile("w", suffix="_iy03_head.py", delete=False) as f:
    f.write(head)
torch.cuda.memory._record_memory_history(max_entries=200000)
runpy.run_path(f.name, run_name="__main__")
snap = torch.cuda.memory._snapshot()
with open(os.path.join(out, "iy03_phase0.pickle"), "wb") as g:
    pickle.dump(snap, g)
print("allocated", torch.cuda.memory_allocated())
for seg in sorted(snap["segments"], key=lambda s: s["address"]):
    if seg["segment_type"] == "large":
        blocks = [(b["size"], b.get("requested_size"), b["state"][:4]) for b in seg["blocks"]]
        print(hex(seg["address"]), seg["total_size"], blocks)
