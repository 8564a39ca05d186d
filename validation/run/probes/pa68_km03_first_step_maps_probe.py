"""Session 68 probe (helper pa; blind298/km03): which op maps what, op by op, from km03's model build to the
end of its first training step, for the two mappings its H100 history shows the twin does not lay out.

With rule 18 (the first cuDNN RNN call, session 68) the twin places km03's first four segments as the H100
did (B-2, B+72, the flat weights at B-504, the 80 MiB projection at B-416; B = the first segment + 2 MiB).
Then they part twice (/work/notes/hist67/km03_hist.pickle.xz against the twin's `--snapshot`):
1. the first batch's 2 MiB segment (`make_batch`'s `.to(device)`, history entry 52) lies at B-678 on the
   GPU, the driver pool's top 8 MiB (B-680..-672: a 2 MiB `/dev/zero` buffer at B-680; rule 14, not laid
   out), the twin's at B-488; its next 2 MiB segment (entry 92) at B-674, so B-676 was taken between them;
2. between the first `embedding`'s output (entry 57, B-336, 14 MiB) and the char CNN's first allocation
   (entry 58) the GPU took 10 MiB at B-322 (the pinned 8.25 MiB mapping of session 21?), so entry 58 and
   every later segment in that range lie 10 MiB higher than the twin's.

    python3 probes/pa68_km03_first_step_maps_probe.py > $OUT/pa68_km03_first_step_maps_probe_h100.txt
    (from validation/run; km03's own script, stopped after its first `optimizer.step()`; about 20 s)

Prints, on a GPU only: `map OP NAME OFFSET_MiB LEN_MiB PERMS PATH` for each mapping an op added (`+`) or
removed (`-`) that is 1 MiB or more, a `/dev/zero` one, or a library (OP: the op's index, counted by a
TorchDispatchMode over the whole script, on the GPU only; `pre` for what came before the first op); then
on the GPU and in the twin, `seg K OFFSET_MiB MiB` for each segment in creation order and
`fig allocated reserved`."""

import os
import runpy
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(
    HERE,
    "..",
    "blind298",
    "km03_cs224n_character_aware_nmt_char_cnn_highway_embeddings_bilstm_encoder_pack_padded_lstmcell_"
    "decoder_multiplicative_attention_teacher_forcing_bf16_then_fixed_width_beam_search.py",
)
ON_GPU = "vramscope" not in sys.modules
state = {"n": 0, "maps": None, "B": None, "lines": []}


def read_maps():
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.add((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


def anchor():
    # the process's first segment (2 MiB, at B-2) + 2 MiB
    if state["B"] is None and torch.cuda.is_initialized():
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        first = next((e for e in trace if e["action"] == "segment_alloc"), None)
        if first is not None:
            state["B"] = first["addr"] + 2 * MIB
    return state["B"]


def note(op, name):
    if not ON_GPU:
        return
    now = read_maps()
    before, state["maps"] = state["maps"], now
    b = anchor()
    if before is None or b is None:
        return
    for sign, group in (("+", now - before), ("-", before - now)):
        for lo, hi, perms, path in sorted(group):
            big = hi - lo >= MIB or "zero" in path or ".so" in path
            if big and "[heap]" not in path and "[stack]" not in path:
                state["lines"].append(
                    f"map {op} {name} {sign} {(lo - b) / MIB:.3f} {(hi - lo) / MIB:.3f} {perms} {path}"
                )


class Maps(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        state["n"] += 1
        note(state["n"], func.__name__)
        return out


def stop(*args, **kwargs):
    # after the first optimizer step: the segments in creation order, then leave
    if ON_GPU:
        mode.__exit__(None, None, None)
    torch.cuda.synchronize()
    out = state["lines"]
    b = anchor()
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    segs = [e for e in trace if e["action"] == "segment_alloc"]
    for k, s in enumerate(segs):
        out.append(f"seg {k} {(s['addr'] - b) / MIB:.3f} {s['size'] / MIB:.3f}")
    out.append(f"fig {torch.cuda.memory_allocated()} {torch.cuda.memory_reserved()}")
    sys.stdout = sys.__stdout__
    print("\n".join(out), flush=True)
    os._exit(0)


torch.cuda.memory._record_memory_history(context=None, max_entries=200_000)
torch.optim.Adam.step = stop
sys.stdout = open(os.devnull, "w")
mode = Maps()
if ON_GPU:
    # (the twin prints no map lines: no mode there)
    mode.__enter__()
note("pre", "-")
runpy.run_path(SCRIPT, run_name="__main__")
