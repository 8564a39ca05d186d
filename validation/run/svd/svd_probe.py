"""`torch.linalg.svd` on CUDA: the allocation sequence of each case (memory history with C++
frames: outputs, infos, the column-major clone, cuSOLVER's workspace, the error checks), and
`cusolverDn<t>gesvdj_bufferSize`'s lwork over a grid of sizes, called through ctypes with the
arguments `apply_svd_cusolver_gesvdj` passes (BatchLinearAlgebraLib.cpp).

    OUT=DIR python3 validation/run/svd/svd_probe.py      (writes DIR/svd_probe.json)

fixtures/run/svd/svd_probe_h200.json is its output on an H200."""

import ctypes
import json
import os

import torch

dev = "cuda"
H = torch.cuda.memory
out = {"torch": torch.__version__, "cuda": torch.version.cuda, "cases": [], "lwork": []}
KEYS = ("at::native::", "cusolver", "magma", "at::_ops::", "torch::autograd::generated")


def frames_of(ev):
    names = []
    for f in ev.get("frames", []):
        n = f.get("name", "")
        if any(k in n for k in KEYS):
            n = n.split("(")[0][-120:]
            if n not in names:
                names.append(n)
        if len(names) >= 5:
            break
    return names


def record(name, fn, **info):
    torch.cuda.synchronize()
    H._record_memory_history(max_entries=100000, stacks="all")
    fn()
    torch.cuda.synchronize()
    snap = H._snapshot()
    H._record_memory_history(enabled=None)
    evs = []
    for tr in snap["device_traces"]:
        for e in tr:
            if e["action"] in ("alloc", "free_requested"):
                evs.append({"a": e["action"][0], "size": e["size"], "f": frames_of(e)})
    out["cases"].append(dict(name=name, events=evs, **info))


CASES = [
    # (batch, m, n, full_matrices, how, dtype)
    ((), 4096, 4096, False, "svd", torch.float32),
    ((), 1024, 4096, False, "svd", torch.float32),
    ((), 4096, 1024, False, "svd", torch.float32),
    ((), 300, 200, True, "svd", torch.float32),
    ((), 300, 200, False, "svd", torch.float32),
    ((), 2048, 2048, False, "svdvals", torch.float32),
    ((), 512, 512, False, "svd", torch.float64),
    ((4,), 256, 128, False, "svd", torch.float32),
    ((8,), 16, 16, False, "svd", torch.float32),
    ((), 32, 20, False, "svd", torch.float32),
    ((), 33, 33, True, "svd", torch.float32),
]
for batch, m, n, full, how, dtype in CASES:
    a = torch.randn(*batch, m, n, device=dev, dtype=dtype)
    if how == "svd":
        fn = lambda a=a, full=full: torch.linalg.svd(a, full_matrices=full)  # noqa: E731
    else:
        fn = lambda a=a: torch.linalg.svdvals(a)  # noqa: E731
    fn()  # warm: cuSOLVER's handle and library
    record(f"{how} {list(batch)} {m}x{n} full={full} {dtype}", fn, m=m, n=n, batch=list(batch), full=full)
    del a


def save():
    os.makedirs(os.environ.get("OUT", "."), exist_ok=True)
    with open(os.path.join(os.environ.get("OUT", "."), "svd_probe.json"), "w") as f:
        json.dump(out, f)


save()
# gesvdj's lwork through ctypes, with the arguments PyTorch passes: lda = m (column-major clone),
# ldu = m, ldv = n, tolerance = the dtype's epsilon, 400 sweeps (cusolver_gesvdj_max_sweeps)
path = next(line.split()[-1] for line in open("/proc/self/maps") if "libcusolver.so" in line)
lib = ctypes.CDLL(path)
handle, params = ctypes.c_void_p(), ctypes.c_void_p()
assert lib.cusolverDnCreate(ctypes.byref(handle)) == 0
buf = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
ptr = ctypes.c_void_p(buf.data_ptr())
SIZES = [
    33,
    48,
    64,
    100,
    128,
    200,
    256,
    384,
    512,
    768,
    1000,
    1024,
    1536,
    2048,
    3072,
    4096,
    5120,
    8192,
    11008,
    14336,
]
for t, eps in (("S", torch.finfo(torch.float32).eps), ("D", torch.finfo(torch.float64).eps)):
    assert lib.cusolverDnCreateGesvdjInfo(ctypes.byref(params)) == 0
    lib.cusolverDnXgesvdjSetTolerance(params, ctypes.c_double(eps))
    lib.cusolverDnXgesvdjSetMaxSweeps(params, ctypes.c_int(400))
    fn = getattr(lib, f"cusolverDn{t}gesvdj_bufferSize")
    for m in SIZES:
        for n in SIZES:
            for econ in (0, 1):
                for jobz in (0, 1):
                    lwork = ctypes.c_int(-1)
                    rc = fn(
                        handle, jobz, econ, m, n, ptr, m, ptr, ptr, m, ptr, n, ctypes.byref(lwork), params
                    )
                    out["lwork"].append([t, m, n, econ, jobz, rc, lwork.value])
    lib.cusolverDnDestroyGesvdjInfo(params)

save()
print(len(out["cases"]), "cases,", len(out["lwork"]), "lwork")
