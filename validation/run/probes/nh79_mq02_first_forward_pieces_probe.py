"""Probe (session 79, helper nh): what takes 4 MiB more of mq02's assert-buffer chunk on the H100.

blind352/mq02's H100 history (fixtures/run/history_mq02_s79_h100.pickle.xz) against the twin replaying the
H100's routing (validation/run/probes/nf79_mq02_routing_replay.py): the same 426,301 allocations and frees,
the first 41 segments at the same places (offsets from the top of segment #2's chunk), then segment #41
(entry 217, a 20 MiB segment in layer 0's first MoE: `final_hidden_states = torch.zeros_like(...)`'s
neighbourhood) parts: the twin puts it in the 20 MiB hole of the chunk whose low end holds the driver's
8.25 MiB device-assert buffer (rule 19, placed as a 10 MiB segment at the embedding, top - 800 MiB) and
the first cuBLAS handle's 2 MiB (rule 8, at the rotary `bmm`): 12 MiB taken, a 20 MiB hole. The H100 makes a
new chunk for #41 (top - 960 MiB) and later puts #43 (12 MiB, entry 332) in that chunk's hole at top - 784
MiB: 16 MiB were taken there. So between the embedding (entry ~159) and entry 217 something took 4 MiB
more of that chunk (two 2 MiB pieces?) on the H100. From there on equal free blocks tie the other way
(block_diff.py --place: first at entry 1907), allocated -3,641,344 from phase 1, one 250 MiB segment fewer.

This probe runs mq02 itself (runpy) under a dispatch mode that, from the first micro-batch's `randint`
on, after every aten op synchronizes and makes a raw 2 MiB `cudaMalloc` (then frees it): it lands at the
low end of the newest chunk's hole, which until segment #41 is the assert buffer's chunk (the cuBLAS
reservation and segment #40 fill chunks of their own). Lines: each op after which the probe moved or a
segment was made, with the probe's move in MiB. It stops at the 46th segment and prints the first 46
segments' offsets from the top of the highest one, to compare with the history's (the probe's own 2 MiB
may move later segments; the lines up to #41 are what counts).

Run (from validation/run): python3 probes/nh79_mq02_first_forward_pieces_probe.py blind352/mq02_*.py
< 60 s (the model is built on the host first), < 3 GB. Plain python3, not the twin.
"""

import ctypes
import runpy
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MIB = 1 << 20
state = {"on": False, "last": None, "segs": 0, "n": 0, "rt": None}


class Stop(Exception):
    pass


def cudart():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart" in line:
                rt = ctypes.CDLL(line.split()[-1])
                rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
                rt.cudaFree.argtypes = [ctypes.c_void_p]
                return rt
    raise RuntimeError("libcudart not mapped")


def probe():
    rt = state["rt"]
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), 2 * MIB) == 0
    assert rt.cudaFree(p) == 0
    return p.value


class Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not state["on"] and func.__name__.startswith("randint"):
            state["on"] = True
            state["rt"] = cudart()
        if state["on"]:
            torch.cuda.synchronize()
            a = probe()
            segs = torch.cuda.memory_stats().get("segment.all.allocated", 0)
            last = state["last"]
            if last is None or a != last or segs != state["segs"]:
                move = 0 if last is None else (a - last) / MIB
                print(f"op {state['n']:4d} {func}: probe {a:#x} moved {move:+.2f} MiB, segments {segs}")
            state["last"], state["segs"] = a, segs
            state["n"] += 1
            if segs >= 46:
                raise Stop
        return out


script = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    with Mode():
        runpy.run_path(script, run_name="__main__")
except Stop:
    pass
segs = sorted(
    ((s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()),
)
top = max(a + n for a, n in segs)
print("segments (offset below the highest segment's top, MiB; size MiB), by address:")
for a, n in sorted(segs, reverse=True):
    print(f"  {(top - a) / MIB:9.2f}  {n / MIB:8.2f}")
