"""Where does the CUDA driver put cudaMalloc'd segments? (vramscope's SimDevice placement rule)

One pattern per fresh process:

    python3 validation/segment_placement.py PATTERN

prints, on one line per step, `STEP: SIZE_MIB@OFFSET_MIB ...` where OFFSET is the address minus
the anchor (the address of the first 2 MiB cudaMalloc of the process, plus 2 MiB), so that runs
of different processes line up. cudaMalloc/cudaFree are called raw (ctypes, the libcudart that
torch loaded), so the caching allocator's rounding and caching play no part; a `probe` step
allocates 2 MiB blocks until N of them are out and frees them again: with a lowest-address
first-fit driver this maps the free holes of the heap in address order.

Patterns:
- `seq`: a load-like sequence of sizes, then frees and reallocations (the pure placement rule).
- `events`: probe after init, after the first kernel launch (randint), after the first cuBLAS
  matmul, after a Linear forward+backward (the autograd thread's cuBLAS handle).
- `matmul`: probe after init and after one bf16 matmul only.

fixtures/alloc/segment_placement_h200.txt is the output of
`for p in seq events events matmul; do python3 validation/segment_placement.py $p; done`
(the device lent was an H200, driver 580.159.04, the same driver as the H100 fixtures);
crates/alloc/src/driver_va.rs reads its rules off it and tests them.
"""

import ctypes
import sys

import torch

MIB = 1 << 20


def cudart():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart" in line:
                return ctypes.CDLL(line.split()[-1])
    raise SystemExit("libcudart not loaded")


class Raw:
    def __init__(self):
        self.rt = cudart()
        self.rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.rt.cudaFree.argtypes = [ctypes.c_void_p]
        self.anchor = None

    def malloc(self, mib):
        p = ctypes.c_void_p()
        rc = self.rt.cudaMalloc(ctypes.byref(p), mib * MIB)
        assert rc == 0, rc
        if self.anchor is None:
            self.anchor = p.value + 2 * MIB
        return p.value

    def free(self, p):
        assert self.rt.cudaFree(ctypes.c_void_p(p)) == 0

    def off(self, p):
        return (p - self.anchor) // MIB


def runs(raw, addrs):
    """2 MiB probe addresses, in allocation order, as runs START+COUNT of consecutive blocks."""
    out = []
    for a in addrs:
        o = raw.off(a)
        if out and out[-1][0] + 2 * out[-1][1] == o:
            out[-1][1] += 1
        else:
            out.append([o, 1])
    return " ".join(f"{s}+{n}" for s, n in out)


def probe(raw, step, n=400):
    ps = [raw.malloc(2) for _ in range(n)]
    print(f"{step}: probe {runs(raw, ps)}", flush=True)
    for p in ps:
        raw.free(p)


def main():
    pattern = sys.argv[1]
    torch.cuda.init()
    torch.cuda.get_device_properties(0)
    raw = Raw()
    first = raw.malloc(2)  # the anchor
    print(f"anchor {raw.anchor:#x} first {raw.off(first)}", flush=True)
    if pattern == "seq":
        sizes = [32, 2, 20, 2, 2, 2, 2, 32, 20, 12, 16, 126, 250, 250, 2, 2, 60, 64, 2, 300, 2, 38]
        live = [(s, raw.malloc(s)) for s in sizes]
        print("seq: " + " ".join(f"{s}@{raw.off(p)}" for s, p in live), flush=True)
        # free the 126 and the first 250, then ask for 120, 250, 2
        for i in (11, 12):
            raw.free(live[i][1])
        again = [(s, raw.malloc(s)) for s in (120, 250, 2, 2)]
        print("realloc: " + " ".join(f"{s}@{raw.off(p)}" for s, p in again), flush=True)
        probe(raw, "after")
    elif pattern in ("events", "matmul"):
        probe(raw, "init")
        if pattern == "events":
            torch.randint(0, 100, (8, 8), device="cuda")
            torch.cuda.synchronize()
            probe(raw, "randint")
        a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
        (a @ a).sum().item()
        probe(raw, "matmul")
        if pattern == "events":
            lin = torch.nn.Linear(1024, 1024, device="cuda")
            x = torch.randn(64, 1024, device="cuda", requires_grad=True)
            lin(x).sum().backward()
            torch.cuda.synchronize()
            probe(raw, "backward")
    segs = [e for e in torch.cuda.memory._snapshot()["segments"]]
    print("torch segments: " + " ".join(f"{s['total_size'] // MIB}@{raw.off(s['address'])}" for s in segs))


if __name__ == "__main__":
    main()
