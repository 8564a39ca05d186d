"""Session 73 (helper fb): where the batched `torch.cholesky_solve` of one right-hand side raises
"CUDA error: invalid argument" (blind334/lw04: (4, 6,144, 6,144) float64 L, batch 4 > 1 takes
`_cholesky_solve_helper_cuda_magma`, MAGMA 2.6.1's `magma_dpotrs_batched`, nrhs 1: two
`magmablas_dtrsv_batched`). Plain python3 on one GPU, < 40 s, < 5 GB. Each dtype runs in a child process
(a CUDA error may poison the context) over rising n until the first raise; a second child steps by one
over the last interval. Lines:

- `DTYPE first_fail N last_ok M`: the threshold by dtype (float32, float64, complex64, complex128), which
  decides whether the twin raises at n * itemsize beyond a limit (issue pytorch#38603 saw float32 fail
  past 12,160 with MAGMA 2.5.2).
- `raise ...: allocated before B after A`: the caching allocator's bytes around the raise (are the two
  working copies, `cloneBatchedColumnMajor` of B and of L, freed by the unwinding?).
- `nrhs2 float64 6144: ...` (trsm path), `batch1 float64 6144: ...` (cuSOLVER potrs): whether they raise.

Run: python3 validation/run/probes/fb73_blind334_magma_cholesky_solve_limit_probe.py"""

import subprocess
import sys

CHILD = r"""
import sys, torch
dt = getattr(torch, sys.argv[1]); ns = [int(x) for x in sys.argv[2].split(",")]
batch, nrhs = int(sys.argv[3]), int(sys.argv[4])
ok = None
for n in ns:
    L = torch.eye(n, dtype=dt, device="cuda").expand(batch, n, n).contiguous()
    b = torch.ones(batch, n, nrhs, dtype=dt, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    try:
        x = torch.cholesky_solve(b, L)
        torch.cuda.synchronize()
        ok = n
        del x
    except Exception as e:
        after = torch.cuda.memory_allocated()
        msg = str(e).splitlines()[0]
        name = type(e).__name__
        print(f"RESULT fail {n} ok {ok} raise {name}: {msg}: allocated before {before} after {after}")
        sys.exit(0)
    del L, b
print(f"RESULT none ok {ok}")
"""


def child(dtype, ns, batch=2, nrhs=1):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, dtype, ",".join(map(str, ns)), str(batch), str(nrhs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    return lines[0] if lines else "RESULT error " + out.stderr.strip().splitlines()[-1][:200]


for dtype, coarse in (
    ("float32", list(range(11776, 12801, 64))),
    ("float64", list(range(5632, 6401, 64))),
    ("complex64", list(range(5632, 6401, 64))),
    ("complex128", list(range(2816, 3201, 32))),
):
    r = child(dtype, coarse)
    if " fail " not in r:
        print(f"{dtype} coarse {r}")
        continue
    fail = int(r.split(" fail ")[1].split()[0])
    ok = r.split(" ok ")[1].split()[0]
    lo = int(ok) + 1 if ok != "None" else coarse[0] - 64
    r2 = child(dtype, list(range(lo, fail + 1)))
    first = int(r2.split(" fail ")[1].split()[0]) if " fail " in r2 else fail
    last = r2.split(" ok ")[1].split()[0] if " ok " in r2 else "None"
    last = ok if last == "None" else last
    print(f"{dtype} first_fail {first} last_ok {last}")
    print(f"  {r2.split(' raise ', 1)[1] if ' raise ' in r2 else r2}")
print(f"nrhs2 float64 6144: {child('float64', [6144], 2, 2)}")
print(f"batch1 float64 6144: {child('float64', [6144], 1, 1)}")
