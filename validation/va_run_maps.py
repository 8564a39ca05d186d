"""Run a PyTorch script in-process with the allocator's memory history on and, after every ATen op
(CPU or CUDA), the process's /proc/self/maps diffed against the op before: where the driver's
segments lie among the process's other mappings, op by op, for any script.

    OUT=PREFIX [MAX_OPS=N] [NO_MAPS=1] python3 validation/va_run_maps.py SCRIPT [ARGS...]

Writes PREFIX.maps.json: {"first": the whole maps after torch's import (start, end, perms, path),
"stops": [[op index, op name, CUDA segments so far, added, removed], ...]} (stops where the maps
changed only), and PREFIX.trace.json: the memory history's alloc/free/segment events as
[action, address, size] (no frames). The maps are read into a preallocated buffer so the probe
maps nothing of its own. Set NO_MAPS=1 for the memory history alone (a second process to compare).
"""

import json
import os
import runpy
import signal
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

BUF = bytearray(8 << 20)
#: ops after which the maps are no longer read (MAX_OPS): the early placements are the ones asked
LIMIT = int(os.environ.get("MAX_OPS", "1000000000"))


def read_maps():
    fd = os.open("/proc/self/maps", os.O_RDONLY)
    n = 0
    while True:
        k = os.readv(fd, [memoryview(BUF)[n:]])
        if k == 0:
            break
        n += k
    os.close(fd)
    out = set()
    at = 0
    while at < n:
        e = BUF.find(b"\n", at, n)
        if e < 0:
            e = n
        f = bytes(BUF[at:e]).split(None, 5)
        a, b = f[0].split(b"-")
        out.add((int(a, 16), int(b, 16), f[1].decode(), f[5].decode().split("/")[-1] if len(f) > 5 else ""))
        at = e + 1
    return out


class Probe(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.prev = read_maps()
        self.first = sorted(self.prev)
        self.stops = []
        self.k = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.k += 1
        if self.k > LIMIT:
            return out
        now = read_maps()
        if now != self.prev:
            segs = -1
            if torch.cuda.is_initialized():
                segs = torch.cuda.memory_stats().get("segment.all.allocated", 0)
            self.stops.append([self.k, str(func), segs, sorted(now - self.prev), sorted(self.prev - now)])
            self.prev = now
        return out


def main():
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    prefix = os.environ["OUT"]
    # a `timeout` still writes what was recorded
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    cuda = torch.cuda.is_available()
    if cuda:  # as validation/run/history.py does, right after torch's import
        torch.cuda.memory._record_memory_history(max_entries=2000000, stacks="python")
    probe = None if os.environ.get("NO_MAPS") else Probe()
    try:
        if probe is None:
            runpy.run_path(script, run_name="__main__")
        else:
            with probe:
                runpy.run_path(script, run_name="__main__")
    finally:
        snap = torch.cuda.memory._snapshot() if cuda else {"device_traces": []}
        tr = [[e["action"], e["addr"], e["size"]] for dev in snap["device_traces"] for e in dev]
        json.dump(tr, open(prefix + ".trace.json", "w"))
        if probe is not None:
            json.dump({"first": probe.first, "stops": probe.stops}, open(prefix + ".maps.json", "w"))


if __name__ == "__main__":
    main()
