"""Session 76 (helper dt): what takes blind339/mb03's context range B-416..B-52 and the 12 MiB holes
of `.cuda()`'s 32 MiB chunks before step 1's first new segments on the H100.

    python3 probes/dt76_mb03_nccl_alloc_probe.py        (from validation/run; the GPU; < 1 min)

dt76_mb03_nccl_maps_probe's H100 maps: no host mapping lies in B-416..B-136 at any mark (the model's
host tensors lie below B-416, NCCL's threads' stacks above the context, their arenas, the driver's
pool, a 200.4 MiB host block and libnvidia-ptxjitcompiler far below), yet step 1's device-side-assert
buffer (8.25 MiB, rule 19) lands at B-136 and its first 32 MiB segment at B-52: device address space
taken between `.cuda()` and step 1's embedding. This probe runs mb03 as that probe does, with NCCL's
own log of its device allocations (`NCCL_DEBUG=INFO`, `NCCL_DEBUG_SUBSYS=INIT,ALLOC`, each pointer
printed as a B offset) and `torch.cuda.mem_get_info()` at each mark (device memory the driver and
NCCL hold outside PyTorch's segments: total - free - reserved), plus a mark after step 1's first
`randint` pair (random kernels keep the context's range, rule 6).
"""

import glob
import os

# NCCL reads these at its first communicator
os.environ.setdefault("NCCL_DEBUG", "INFO")
os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,ALLOC")
os.environ["NCCL_DEBUG_FILE"] = f"/tmp/dt76_nccl_alloc.{os.getpid()}.log"
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
            (torch.cuda.memory_reserved(), torch.cuda.mem_get_info()),
            maps(),
        )
    )


def dump():
    b = base()
    print(f"B {b:#x}" if b else "B unknown", flush=True)
    for tag, init, ctx, tasks, pythreads, reserved, mp in marks:
        print(
            f"== {tag}: cuda initialized {init} primary context {ctx} tasks {tasks} python threads "
            f"{pythreads} reserved, (free, total) {reserved}"
        )
        prev = None
        for lo, hi, perm, nm in mp:
            if b and not (b - 12 * 1024 * MIB < hi and lo < b + 8 * 1024 * MIB):
                continue
            where = f"B{(lo - b) / MIB:+11.3f}" if b else f"{lo:#x}"
            gap = (lo - prev) / MIB if prev is not None else 0.0
            print(f"  {where} len {(hi - lo) / MIB:10.3f} gap {gap:10.3f} {perm} {nm}")
            prev = hi
    print("NCCL's log (INIT, ALLOC), pointers as B offsets in MiB:")
    import re

    try:
        log = open(os.environ["NCCL_DEBUG_FILE"]).read().splitlines()
    except OSError as e:
        log = [repr(e)]
    for ln in log:
        if b:
            ln = re.sub(
                r"0x[0-9a-f]{9,}", lambda m: f"{m.group(0)}[B{(int(m.group(0), 16) - b) / MIB:+.3f}]", ln
            )
        print("  " + ln)
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
    # the loop's first pass (the hook stops the process at its optimizer step)
    "    with torch.autocast(": "    mark('after step 1 randint')\n    with torch.autocast(",
}
for a, b_ in cuts.items():
    assert src.count(a) >= 1, a
    src = src.replace(a, b_, 1)
sys.argv = [script]
exec(compile(src, script, "exec"), {"__name__": "__main__", "__file__": script, "mark": mark})
