"""Where page-locked host memory (`Tensor.pin_memory()`, `empty(..., pin_memory=True)`: CUDA's
caching host allocator, `cudaHostAlloc`) lies in the process's address space, against the device
segments around it. One case per process: `python3 probe.py CASE` prints one JSON line: each step's
new and removed mappings (`/proc/self/maps`) and the pointers it made, all in bytes.

Cases: `gg01` (blind189/gg01's order: context, a cuBLAS GEMM and a pointwise kernel, two 20 MiB
segments, then 24 MiB, 9,216 and 7,168 bytes pinned and the 24 MiB copied to the device),
`sizes` (4 KiB to 600 MiB pinned one after another, then a device segment), `first` (a pin before
the context exists), `free` (24 MiB pinned, freed, the host cache emptied, pinned again), `many`
(six 40 MiB segments, each followed by a 64 MiB pinned block, as `save_on_cpu` makes them; the
blocks freed, then three 100 MiB segments), `small` (twelve 2 MiB blocks, then 4 MiB, then a device
segment)."""

import json
import sys

import torch

MiB = 1 << 20


def maps():
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.add((lo, hi, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


class Log:
    def __init__(self):
        self.before = maps()
        self.steps = []

    def step(self, name, **ptrs):
        now = maps()
        new = sorted(now - self.before)
        gone = sorted(self.before - now)
        self.steps.append({"step": name, "new": new, "gone": gone, "ptrs": ptrs})
        self.before = now


def context(log):
    a = torch.zeros(1, device="cuda")
    log.step("context", a=a.data_ptr())
    m = torch.ones(64, 64, device="cuda")
    p = m @ m
    log.step("cublas", p=p.data_ptr())
    q = torch.relu(p)
    log.step("pointwise", q=q.data_ptr())
    s1 = torch.empty(20 * MiB, dtype=torch.uint8, device="cuda")
    s2 = torch.empty(20 * MiB, dtype=torch.uint8, device="cuda")
    log.step("segments", s1=s1.data_ptr(), s2=s2.data_ptr())
    return [a, m, p, q, s1, s2]


def case_gg01(log, keep):
    keep += context(log)
    imgs = torch.randint(0, 256, (2, 256, 3, 128, 128), dtype=torch.uint8)
    proprio = torch.randn(256, 9)
    actions = torch.rand(256, 7) * 2 - 1
    log.step("host", imgs=imgs.data_ptr())
    pi = imgs.pin_memory()
    log.step("pin 25165824", pi=pi.data_ptr())
    pp = proprio.pin_memory()
    log.step("pin 9216", pp=pp.data_ptr())
    pa = actions.pin_memory()
    log.step("pin 7168", pa=pa.data_ptr())
    d = pi.to("cuda", non_blocking=True)
    log.step("to cuda 25165824", d=d.data_ptr())
    e = torch.empty(80 * MiB, dtype=torch.uint8, device="cuda")
    log.step("device 80 MiB", e=e.data_ptr())
    keep += [pi, pp, pa, d, e]


def case_sizes(log, keep):
    keep += context(log)
    for n in (4096, 2 * MiB, 8 * MiB, 24 * MiB, 100 * MiB, 600 * MiB):
        t = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        log.step(f"pin {n}", t=t.data_ptr())
        keep.append(t)
    d = torch.empty(24 * MiB, dtype=torch.uint8, device="cuda")
    log.step("device 24 MiB", d=d.data_ptr())
    keep.append(d)


def case_first(log, keep):
    t = torch.empty(24 * MiB, dtype=torch.uint8, pin_memory=True)
    log.step("pin 25165824 first", t=t.data_ptr())
    keep.append(t)
    keep += context(log)


def case_free(log, keep):
    keep += context(log)
    t = torch.empty(24 * MiB, dtype=torch.uint8, pin_memory=True)
    log.step("pin 25165824", t=t.data_ptr())
    del t
    log.step("del")
    torch._C._host_emptyCache()
    log.step("host_emptyCache")
    u = torch.empty(24 * MiB, dtype=torch.uint8, pin_memory=True)
    log.step("pin again", u=u.data_ptr())
    d = torch.empty(24 * MiB, dtype=torch.uint8, device="cuda")
    log.step("device 24 MiB", d=d.data_ptr())
    keep += [u, d]


def case_many(log, keep):
    # save_on_cpu's order: a device tensor, then its 64 MiB pinned copy, six times; the blocks freed
    # to the host cache; then new device segments
    keep += context(log)
    held = []
    for k in range(6):
        d = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")
        t = torch.empty(64 * MiB, dtype=torch.uint8, pin_memory=True)
        t[: 40 * MiB].copy_(d)
        log.step(f"device 40 MiB, pin 64 MiB ({k})", d=d.data_ptr(), t=t.data_ptr())
        held += [d, t]
    del held[1::2]
    log.step("pins freed")
    for k in range(3):
        e = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
        log.step(f"device 100 MiB ({k})", e=e.data_ptr())
        keep.append(e)
    keep += held


def case_small(log, keep):
    # twelve 2 MiB blocks, then 4 MiB: where the pool's top runs out
    keep += context(log)
    for k in range(12):
        t = torch.empty(2 * MiB, dtype=torch.uint8, pin_memory=True)
        log.step(f"pin 2 MiB ({k})", t=t.data_ptr())
        keep.append(t)
    t = torch.empty(4 * MiB, dtype=torch.uint8, pin_memory=True)
    log.step("pin 4 MiB", t=t.data_ptr())
    keep.append(t)
    d = torch.empty(24 * MiB, dtype=torch.uint8, device="cuda")
    log.step("device 24 MiB", d=d.data_ptr())
    keep.append(d)


CASES = {
    "gg01": case_gg01,
    "sizes": case_sizes,
    "first": case_first,
    "free": case_free,
    "many": case_many,
    "small": case_small,
}

if __name__ == "__main__":
    name = sys.argv[1]
    log, keep = Log(), []
    CASES[name](log, keep)
    segs = [(s["address"], s["total_size"]) for s in torch.cuda.memory._snapshot()["segments"]]
    print(json.dumps({"case": name, "steps": log.steps, "segments": sorted(segs)}))
