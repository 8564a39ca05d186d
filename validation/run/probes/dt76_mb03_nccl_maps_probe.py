"""Session 76 (helper dt): where blind339/mb03's host-built model, the threads of a one-rank NCCL
`init_process_group` and the CUDA context lie, and where `.cuda()`'s and step 1's segments go.

    python3 probes/dt76_mb03_nccl_maps_probe.py        (from validation/run; the GPU; < 1 min)

dt76_mb03_peak_slack_probe's H100 block map (step 1) holds the same segments as the twin's, in
another address order: on the H100 the model's `.cuda()` segments lie below the 2 MiB small
segment (B-2) and the 20 MiB one (B+72), in creation order downward, with no step-1 12 MiB segment
in their 32 MiB chunks; in the twin they lie above the context in the freed host tensors' ranges
(driver rule 11: a model built on the host before the context), with 12 MiB segments in their
chunks' holes. torch 2.11's `torch.cuda.set_device` calls `c10::cuda::set_device(device, /*force=*/true)`
(libtorch_python.so's THCPModule_setDevice_wrap), so `cudaSetDevice`, which since CUDA 12 initializes
the primary context at once: mb03's context would then exist before its model is built.
This probe runs mb03 unmodified but for marks (its source with `model =
Transformer().cuda()` split in two) and prints, at each mark, `torch.cuda.is_initialized()`,
whether the device's primary context exists (no CUDA call before `set_device`: the memory
history starts right after it), the process's thread count and /proc/self/maps
(anonymous and file mappings of 1 MiB or more within B-12 GiB..B+8 GiB, offsets in MiB from B).
After optimizer step 1 it prints every segment in creation order (B-relative offset, size, first
script line) and stops. B is the first 2 MiB segment + 2 MiB (driver rule 4).
"""

import glob
import os
import sys
import threading

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

MIB = 1 << 20
script = os.path.abspath(glob.glob("blind339/mb03_*.py")[0])
name = os.path.basename(script)
marks = []


def maps():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()
            lo, hi = (int(x, 16) for x in p[0].split("-"))
            if hi - lo >= MIB or (p[5:] and p[5].startswith("[")):
                out.append((lo, hi, p[1], p[5] if len(p) > 5 else ""))
    return out


def base():
    for e in torch.cuda.memory._snapshot()["device_traces"][0]:
        if e["action"] == "segment_alloc" and e["size"] == 2 * MIB:
            return e["addr"] + 2 * MIB
    return None


def mark(tag, cuda=True):
    """`cuda=False` before the script's first CUDA call: no query that could start CUDA."""
    if not cuda:
        marks.append(
            (tag, None, None, len(os.listdir("/proc/self/task")), threading.active_count(), None, maps())
        )
        return
    try:
        ctx = torch._C._cuda_hasPrimaryContext(0)
    except Exception as e:
        ctx = repr(e)
    marks.append(
        (
            tag,
            torch.cuda.is_initialized(),
            ctx,
            len(os.listdir("/proc/self/task")),
            threading.active_count(),
            torch.cuda.memory_reserved(),
            maps(),
        )
    )


def dump():
    b = base()
    print(f"B {b:#x}" if b else "B unknown", flush=True)
    for tag, init, ctx, tasks, pythreads, reserved, mp in marks:
        print(
            f"== {tag}: cuda initialized {init} primary context {ctx} tasks {tasks} python threads "
            f"{pythreads} reserved {reserved}"
        )
        prev = None
        for lo, hi, perm, nm in mp:
            if b and not (b - 12 * 1024 * MIB < hi and lo < b + 8 * 1024 * MIB):
                continue
            where = f"B{(lo - b) / MIB:+11.3f}" if b else f"{lo:#x}"
            gap = (lo - prev) / MIB if prev is not None else 0.0
            print(f"  {where} len {(hi - lo) / MIB:10.3f} gap {gap:10.3f} {perm} {nm}")
            prev = hi
    trace = torch.cuda.memory._snapshot()["device_traces"][0]
    print("segments in creation order (B offset MiB, MiB, first script line):")
    for e in trace:
        if e["action"] in ("segment_alloc", "segment_free"):
            line = next(
                (f["line"] for f in e.get("frames") or [] if os.path.basename(f["filename"]) == name), "?"
            )
            where = f"B{(e['addr'] - b) / MIB:+.1f}" if b else hex(e["addr"])
            print(f"  {e['action'][8:]} {where} {e['size'] / MIB:g} line {line}")
    sys.stdout.flush()


def after_step(opt, args, kwargs):
    mark("after step 1")
    dump()
    os._exit(0)


register_optimizer_step_post_hook(after_step)
src = open(script).read()
cuts = {
    "import os\n": "import os\nmark('start', cuda=False)\n",
    "torch.cuda.set_device(": "mark('after init_process_group', cuda=False)\ntorch.cuda.set_device(",
    # the history starts after set_device (before the first allocation), so nothing before it
    # touches CUDA
    "tp = dist.get_world_size()\n": (
        "mark('after set_device')\n"
        "torch.cuda.memory._record_memory_history(max_entries=3000000, stacks='python')\n"
        "tp = dist.get_world_size()\n"
    ),
    "torch.manual_seed(3393)\n": "mark('after init_device_mesh')\ntorch.manual_seed(3393)\n",
    "model = Transformer().cuda()\n": (
        "model = Transformer()\nmark('model built')\nmodel = model.cuda()\nmark('after .cuda()')\n"
    ),
    "opt = torch.optim.AdamW(": "mark('after parallelize_module')\nopt = torch.optim.AdamW(",
}
for a, b_ in cuts.items():
    assert src.count(a) >= 1, a
    src = src.replace(a, b_, 1)
sys.argv = [script]
exec(compile(src, script, "exec"), {"__name__": "__main__", "__file__": script, "mark": mark})
