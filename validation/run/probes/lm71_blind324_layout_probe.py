"""Where blind324's scripts part from the twin inside a phase (session 71, helper lm): runs one blind
script unchanged (runpy, as `__main__`) with read-only instruments, for the phases named:

- `fwd PH N TYPE ALLOC PEAK` after each nn.Module forward (a global hook), the first LM71_FWD (400) a phase;
- `mod PH to|half|float TYPE ALLOC PEAK` after each top-level `Module.to` / `.half()` / `.float()`, then
  its layout; `app PH TYPE SHAPES ALLOC PEAK` after they convert each leaf module's tensors;
- `opt PH pre|post N TYPE ALLOC PEAK` before and after each optimizer step (global step hooks), then
  the layout;
- `layout TAG ...` at the end of every phase (the script's reset_peak_memory_stats) and where named
  above: each segment of `torch.cuda.memory_snapshot()` ordered by (stream, pool, size, address), its
  stream, its address in MiB above the lowest segment's (@N), its size and its blocks in address order
  (`a` allocated, `i` inactive, bytes; small-pool segments as counts); `layoutbase TAG ADDRESS` the lowest
  segment's address; after each `mod` line also `maps TAG RANGE SIZE PERMS`, the process's anonymous
  mappings of 1 MiB or more (on the GPU's host; the twin's lines here are this machine's, not compared).

    python3 probes/lm71_blind324_layout_probe.py blind324/SCRIPT.py PHASES   (from validation/run)

PHASES: comma-separated phase numbers ("0,2"). Nothing here allocates CUDA memory or resets a peak."""

import os
import runpy
import sys

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

script, phases = sys.argv[1], {int(p) for p in sys.argv[2].split(",")}
state = {"phase": 0, "fwd": 0, "depth": 0}
FWD_LINES = int(os.environ.get("LM71_FWD", "400"))


def mem():
    return f"{torch.cuda.memory_allocated()} {torch.cuda.max_memory_allocated()}"


def layout(tag):
    streams = {}
    segs = []
    snap = torch.cuda.memory_snapshot()
    lo = min((s["address"] for s in snap), default=0)
    print(f"layoutbase {tag} {lo:#x}")
    for s in snap:
        st = streams.setdefault(s["stream"], len(streams) + 1) if s["stream"] else 0
        segs.append((st, s["segment_type"], s["total_size"], s["address"], s))
    segs.sort(key=lambda t: (t[0], t[1], t[2], t[3]))
    for st, kind, total, address, s in segs:
        at = f"s{st} @{(address - lo) >> 20}"
        blocks = sorted(s["blocks"], key=lambda b: b["address"])
        if kind == "small":
            n = sum(b["state"] == "active_allocated" for b in blocks)
            print(f"layout {tag} {at} small {total} alloc {s['allocated_size']} n {n}")
        else:
            desc = " ".join(
                ("a" if b["state"] == "active_allocated" else "i") + str(b["size"]) for b in blocks
            )
            print(f"layout {tag} {at} large {total} : {desc}")


def maps(tag):
    """This process's anonymous mappings of 1 MiB or more (the host's side of the address space)."""
    try:
        lines = open("/proc/self/maps").read().splitlines()
    except OSError:
        return
    for line in lines:
        w = line.split()
        lo, hi = (int(x, 16) for x in w[0].split("-"))
        if len(w) == 5 and hi - lo >= 1 << 20:
            print(f"maps {tag} {w[0]} {(hi - lo) >> 10}K {w[1]}")


real_reset = torch.cuda.reset_peak_memory_stats


def reset(*args, **kwargs):
    print(f"phase {state['phase']} end {mem()} {torch.cuda.memory_reserved()}", flush=True)
    if state["phase"] in phases:
        layout(state["phase"])
    state["phase"] += 1
    state["fwd"] = 0
    return real_reset(*args, **kwargs)


torch.cuda.reset_peak_memory_stats = reset


def hook(module, args, output):
    if state["phase"] in phases and state["fwd"] < FWD_LINES:
        state["fwd"] += 1
        print(f"fwd {state['phase']} {state['fwd']} {type(module).__name__} {mem()}")


torch.nn.modules.module.register_module_forward_hook(hook)


def wrap(name):
    real = getattr(torch.nn.Module, name)

    def call(self, *args, **kwargs):
        state["depth"] += 1
        try:
            return real(self, *args, **kwargs)
        finally:
            state["depth"] -= 1
            if state["depth"] == 0 and state["phase"] in phases:
                print(f"mod {state['phase']} {name} {type(self).__name__} {mem()}")
                layout(f"{state['phase']}.{name}")
                maps(f"{state['phase']}.{name}")

    setattr(torch.nn.Module, name, call)


for name in ("to", "half", "float"):
    wrap(name)


def step_hook(when):
    def hook(opt, args, kwargs):
        if state["phase"] in phases:
            state["step"] = state.get("step", 0) + (when == "pre")
            print(f"opt {state['phase']} {when} {state['step']} {type(opt).__name__} {mem()}")
            layout(f"{state['phase']}.{when}{state['step']}")

    return hook


register_optimizer_step_pre_hook(step_hook("pre"))
register_optimizer_step_post_hook(step_hook("post"))

real_apply = torch.nn.Module._apply


def apply(self, fn, *args, **kwargs):
    out = real_apply(self, fn, *args, **kwargs)
    if state["depth"] and state["phase"] in phases and not any(True for _ in self.children()):
        shapes = [tuple(p.shape) for p in self.parameters(recurse=False)]
        print(f"app {state['phase']} {type(self).__name__} {shapes} {mem()}")
    return out


torch.nn.Module._apply = apply

sys.argv = [script]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
print(f"phase {state['phase']} end {mem()} {torch.cuda.memory_reserved()}")
if state["phase"] in phases:
    layout(state["phase"])
