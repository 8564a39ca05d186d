"""The autograd engine's device thread and the driver: probe a known chunk's hole with raw 2 MiB
cudaMalloc's (then freed) and diff /proc/self/maps around each stage: a CPU-only backward (starts
the device threads), a CUDA backward without cuBLAS, a backward with a matmul (the thread's cuBLAS
handle), a second one. Offsets in MiB from the anchor (first 2 MiB cudaMalloc + 2 MiB)."""

import ctypes

import torch

MIB = 1 << 20


def cudart():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libcudart" in line:
                return ctypes.CDLL(line.split()[-1])


rt = cudart()
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
anchor = None


def malloc(mib):
    global anchor
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), mib * MIB) == 0
    if anchor is None:
        anchor = p.value + 2 * MIB
    return p.value


def off(a):
    return (a - anchor) / MIB


def maps():
    out = {}
    for line in open("/proc/self/maps"):
        f = line.split()
        a, b = (int(x, 16) for x in f[0].split("-"))
        out[(a, b, f[1], f[5] if len(f) > 5 else "")] = 1
    return out


def diff(tag, m0, m1):
    for k in sorted(set(m1) - set(m0)):
        print(f"  {tag} + {off(k[0]):10.2f} {off(k[1]):10.2f} {(k[1] - k[0]) / MIB:8.2f} {k[2]} {k[3]}")
    for k in sorted(set(m0) - set(m1)):
        print(f"  {tag} - {off(k[0]):10.2f} {off(k[1]):10.2f} {(k[1] - k[0]) / MIB:8.2f} {k[2]} {k[3]}")


def probe(tag, n=10):
    ps = [malloc(2) for _ in range(n)]
    print(f"{tag}: probe " + " ".join(f"{off(p):.0f}" for p in ps), flush=True)
    for p in ps:
        assert rt.cudaFree(ctypes.c_void_p(p)) == 0


def stage(tag, m):
    """Probe, then diff the maps against `m`; the maps now."""
    probe(tag)
    m1 = maps()
    diff(tag, m, m1)
    return m1


def segs(tag):
    print(
        f"{tag}: torch segments "
        + " ".join(f"{s['total_size'] // MIB}@{off(s['address']):.0f}" for s in torch.cuda.memory_snapshot())
    )


torch.cuda.init()
first = malloc(2)
a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
(a @ a).sum().item()
w = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
s = torch.empty(1024, device="cuda")
del w, s  # cached: a 64 MiB block and a small segment
big = malloc(500)
print(f"anchor {anchor:#x} big {off(big):.0f}")
segs("start")
probe("start")
m = maps()
x = torch.randn(4, 4, requires_grad=True)
x.sum().backward()
m = stage("cpu_backward", m)
y = torch.randn(1024, device="cuda", requires_grad=True)
(y * y).sum().backward()
torch.cuda.synchronize()
m = stage("cuda_backward", m)
segs("cuda_backward")
lin = torch.nn.Linear(1024, 1024, device="cuda")
xx = torch.randn(64, 1024, device="cuda", requires_grad=True)
lin(xx).sum().backward()
torch.cuda.synchronize()
m = stage("mm_backward", m)
segs("mm_backward")
lin(xx).sum().backward()
torch.cuda.synchronize()
m = stage("mm_backward2", m)
big2 = malloc(500)
print(f"big2 {off(big2):.0f}")
probe("end")
