"""Allocation sequences of `torch.linalg.cholesky_ex` (cuSOLVER potrf's workspace over n, dtype and
batch), `torch.cholesky_solve` (potrs, batched, broadcast, and its backward) and `torch.sparse.mm`
of a sparse COO matrix and a dense one (cuSPARSE SpMM's buffer over rows, columns, nnz, dense
columns, dtype and the dense operand's layout, and the backward), from the allocator's memory
history with C++ frames, one history per case.

    OUT=DIR python3 validation/run/linalg_sparse_probe.py      (writes DIR/probe.json)

fixtures/run/linalg_sparse/linalg_sparse_probe_h200.json is its output on an H200."""

import json
import os

import torch

dev = "cuda"
H = torch.cuda.memory
out = {
    "torch": torch.__version__,
    "cuda": torch.version.cuda,
    "has_magma": torch.cuda.has_magma,
    "preferred_linalg": str(torch.backends.cuda.preferred_linalg_library()),
    "cases": [],
}
KEYS = ("at::native::", "cusolver", "cusparse", "magma", "at::_ops::", "torch::autograd::generated")


def frames_of(ev):
    names = []
    for f in ev.get("frames", []):
        n = f.get("name", "")
        if any(k in n for k in KEYS):
            n = n.split("(")[0][-120:]
            if n not in names:
                names.append(n)
        if len(names) >= 6:
            break
    return names


def record(name, fn, **info):
    torch.cuda.synchronize()
    H._record_memory_history(max_entries=100000, stacks="all")
    res = fn()
    torch.cuda.synchronize()
    snap = H._snapshot()
    H._record_memory_history(enabled=None)
    evs = []
    for tr in snap["device_traces"]:
        for e in tr:
            if e["action"] in ("alloc", "free_requested"):
                evs.append({"a": e["action"][0], "size": e["size"], "addr": e["addr"], "f": frames_of(e)})
    out["cases"].append(dict(name=name, events=evs, **info))
    return res


def spd(n, dtype, batch=()):
    a = torch.randn(*batch, n, n, device=dev, dtype=dtype) / n**0.5
    return a @ a.mH + torch.eye(n, device=dev, dtype=dtype)


# ---- potrf: one matrix ------------------------------------------------------------------------
NS = [
    1,
    2,
    3,
    8,
    16,
    31,
    32,
    33,
    63,
    64,
    65,
    100,
    127,
    128,
    129,
    255,
    256,
    257,
    300,
    511,
    512,
    513,
    1000,
    1023,
    1024,
    1025,
    1500,
    2000,
    2047,
    2048,
    2049,
    3000,
    4095,
    4096,
    4097,
    6000,
    8192,
]
for dtype in (torch.float32, torch.float64):
    for n in NS:
        a = spd(n, dtype)
        record("potrf", lambda a=a: torch.linalg.cholesky_ex(a), n=n, dtype=str(dtype))
        del a
for dtype in (torch.complex64, torch.complex128):
    for n in (64, 512, 4096):
        a = spd(n, dtype)
        record("potrf", lambda a=a: torch.linalg.cholesky_ex(a), n=n, dtype=str(dtype))
        del a

# ---- potrf of a batch ----------------------------------------------------------------------------
for dtype in (torch.float32, torch.float64):
    for b, n in ((2, 8), (5, 64), (3, 512), (64, 32), (2, 2048)):
        a = spd(n, dtype, (b,))
        record("potrf_batch", lambda a=a: torch.linalg.cholesky_ex(a), n=n, batch=b, dtype=str(dtype))
        del a

# ---- cholesky_solve -------------------------------------------------------------------------------
for n, k, ba, bb, dtype in (
    (4096, 1, (), (), torch.float64),
    (1000, 16, (), (), torch.float32),
    (256, 1, (4,), (4,), torch.float32),
    (256, 8, (4,), (4,), torch.float32),
    (256, 8, (), (4,), torch.float64),
    (256, 1, (3,), (), torch.float64),
    (64, 3, (2, 3), (2, 3), torch.float32),
):
    L = torch.linalg.cholesky(spd(n, dtype, ba))
    B = torch.randn(*bb, n, k, device=dev, dtype=dtype)
    record(
        "cholesky_solve",
        lambda B=B, L=L: torch.cholesky_solve(B, L),
        n=n,
        k=k,
        batch_a=list(ba),
        batch_b=list(bb),
        dtype=str(dtype),
    )
    del L, B

# cholesky_solve forward and backward (both operands require grad)
L = torch.linalg.cholesky(spd(512, torch.float32)).requires_grad_()
B = torch.randn(512, 4, device=dev, requires_grad=True)
x = record(
    "cholesky_solve_forward", lambda B=B, L=L: torch.cholesky_solve(B, L), n=512, k=4, dtype="torch.float32"
)
record("cholesky_solve_backward", lambda: x.sum().backward(), n=512, k=4, dtype="torch.float32")
del L, B, x


# ---- sparse.mm -------------------------------------------------------------------------------------
def sparse(m, k, nnz, dtype, coalesce=True, seed=0):
    g = torch.Generator(device=dev).manual_seed(seed)
    idx = torch.stack(
        [
            torch.randint(0, m, (nnz,), device=dev, generator=g),
            torch.randint(0, k, (nnz,), device=dev, generator=g),
        ]
    )
    s = torch.sparse_coo_tensor(idx, torch.randn(nnz, device=dev, dtype=dtype, generator=g), (m, k))
    return s.coalesce() if coalesce else s


for m, k, nnz, n, dtype, layout, coal in (
    (100000, 100000, 1_700_000, 256, torch.float32, "row", True),
    (100000, 100000, 1_700_000, 40, torch.float32, "row", True),
    (100000, 100000, 1000, 64, torch.float32, "row", True),
    (100000, 100000, 100_000, 64, torch.float32, "row", True),
    (100000, 100000, 500_000, 64, torch.float32, "row", True),
    (100000, 100000, 3_400_000, 64, torch.float32, "row", True),
    (1000, 1000, 20_000, 64, torch.float32, "row", True),
    (10000, 10000, 100_000, 64, torch.float32, "row", True),
    (1_000_000, 1_000_000, 2_000_000, 16, torch.float32, "row", True),
    (10000, 100, 100_000, 64, torch.float32, "row", True),
    (10000, 100000, 100_000, 64, torch.float32, "row", True),
    (100, 10000, 100_000, 64, torch.float32, "row", True),
    (10000, 10000, 100_000, 1, torch.float32, "row", True),
    (10000, 10000, 100_000, 2, torch.float32, "row", True),
    (10000, 10000, 100_000, 7, torch.float32, "row", True),
    (10000, 10000, 100_000, 512, torch.float32, "row", True),
    (10000, 10000, 100_000, 64, torch.float64, "row", True),
    (100000, 100000, 1_700_000, 40, torch.float64, "row", True),
    (10000, 10000, 100_000, 64, torch.float32, "col", True),
    (100000, 100000, 1_700_000, 40, torch.float32, "col", True),
    (10000, 10000, 100_000, 64, torch.float32, "slice", True),
    (10000, 10000, 100_000, 64, torch.float32, "row", False),
):
    s = sparse(m, k, nnz, dtype, coal)
    if layout == "row":
        d = torch.randn(k, n, device=dev, dtype=dtype)
    elif layout == "col":
        d = torch.randn(n, k, device=dev, dtype=dtype).t()
    else:
        d = torch.randn(k, 2 * n, device=dev, dtype=dtype)[:, :n]
    record(
        "sparse_mm",
        lambda s=s, d=d: torch.sparse.mm(s, d),
        m=m,
        k=k,
        nnz=s._nnz(),
        n=n,
        dtype=str(dtype),
        layout=layout,
        coalesced=coal,
    )
    del s, d

# forward and backward of a GCN-like layer: adj @ (x W), grad to W through adj^T
adj = sparse(20000, 20000, 200_000, torch.float32)
x = torch.randn(20000, 32, device=dev)
lin = torch.nn.Linear(32, 48).to(dev)
y = record(
    "sparse_mm_forward",
    lambda: torch.sparse.mm(adj, lin(x)),
    m=20000,
    k=20000,
    nnz=adj._nnz(),
    n=48,
    dtype="torch.float32",
)
record(
    "sparse_mm_backward",
    lambda: y.sum().backward(),
    m=20000,
    k=20000,
    nnz=adj._nnz(),
    n=48,
    dtype="torch.float32",
)

path = os.path.join(os.environ.get("OUT", "."), "probe.json")
with open(path, "w") as f:
    json.dump(out, f)
print("wrote", path, len(out["cases"]), "has_magma", out["has_magma"], out["preferred_linalg"])
