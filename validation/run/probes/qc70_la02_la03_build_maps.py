"""Probe (session 70, helper qc) for blind312/la02 and la03's small-pool segment count.
`block_diff.py --cross` over their pool probes' H100 histories (session 69) shows the count follows the
segments' addresses, not the requests: each side's requests over the other's addresses give the other's
count. Where the addresses part: la02 (`QC_SCRIPT=la02`) from its first cuDNN convolution (ActNorm's data
init; its 17th segment, 96 MiB for the first `elu`, lies 6 MiB higher on the H100 than in the twin, as if
the first cuDNN handle took 6 MiB placed as a segment); la03 (`QC_SCRIPT=la03`) from its `valid_rolls`
(20 MiB, 10 MiB higher on the H100, where rule 2 would put session 21's pinned 8.25 MiB mapping; its next
two 2 MiB segments lie in what looks like the driver pool's top). Runs the script up to `model.train()`
(la02 also its first training step) and prints every segment (size, offset from the first) in the order
made: lines the twin prints too. GPU: under `../va_run_maps.py` (the maps after every op), as the request
file says; < 30 s, < 7 GB."""

import os
import pathlib

import torch

if "OUT" not in os.environ:  # va_run_maps.py records the history itself
    torch.cuda.memory._record_memory_history(max_entries=2000000, stacks="python")
name = os.environ.get("QC_SCRIPT", "la02")
here = pathlib.Path(__file__).resolve().parent.parent
src = next((here / "blind312").glob(f"{name}_*.py"))
g = {"__name__": name, "__file__": str(src)}
exec(compile(src.read_text().split("\nmodel.train()\n")[0], str(src), "exec"), g)
if name == "la02":
    model, optimizer, images, batch_size = g["model"], g["optimizer"], g["images"], g["batch_size"]
    model.train()
    idx = torch.randint(0, images.shape[0], (batch_size,), device="cuda")
    x, ld_pre = g["preprocess"](images[idx])
    z, logdet = model(x, n_terms=5)
    loss = g["bits_per_dim"](z, logdet + ld_pre)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    del x, z, logdet, loss
torch.cuda.synchronize()
trace = torch.cuda.memory._snapshot()["device_traces"]
segs = [e for e in trace[0] if e["action"] == "segment_alloc"]
first = segs[0]["addr"] if segs else 0
for k, e in enumerate(segs):
    print(f"{name} seg {k}: {e['size'] >> 20} MiB at {(e['addr'] - first) / 2**20:+.0f} MiB")
print(f"{name} reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}")
