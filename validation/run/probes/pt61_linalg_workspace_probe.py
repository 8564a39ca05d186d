"""Session 61 (helper pt): the allocations inside the linalg calls that blind272 makes and the twin
names unmeasured (plain `python3`, one GPU, about 10 s). For each case: the caching allocator's
alloc/free events inside the call (memory history, sizes in bytes, in order) and the call's peak above
what was allocated before it.

- jm05: `torch.linalg.eig` (cuSOLVER `cusolverDnXgeev` looped per matrix: one device workspace, from
  `cusolverDnXgeev_bufferSize`) of one 32 x 32 float64 matrix and of 512 of them, `linalg.eigvals`,
  eig's backward; `linalg.lstsq` (gels) of 32,768 x 32 float64 with 32 right-hand sides (geqrf and
  ormqr workspaces) and batched (512, 64, 32) (no rule in the twin); `linalg.solve` complex128
  (getrf workspace) 32 x 32 with 512 right-hand sides and batched (512, 32, 32) with one.
- jm03: PowerSGD's `torch.linalg.qr(M, out=(M, torch.empty(b, r, r)))` on row-major (b, n, r) float32
  (the out tensors are not column-major: structured-kernel proxies for Q and R, geqrf/orgqr
  workspaces for r = 4 and 8, which cusolver_h200.json does not hold).
The twin's reading of each line is in fixtures/run/README.md's blind272 paragraph.
"""

import torch

dev = "cuda"
torch.manual_seed(0)


def events(tag, fn):
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=200000)
    out = fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ev = []
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            ev.append(f"+{e['size']}")
        elif e["action"] == "free_requested":
            ev.append(f"-{e['size']}")
    print(f"{tag}: peak_above {torch.cuda.max_memory_allocated() - base} events {' '.join(ev)}")
    return out


for batch in (None, 512):
    shape = (32, 32) if batch is None else (batch, 32, 32)
    a = torch.randn(*shape, device=dev, dtype=torch.float64)
    events(f"eig {tuple(shape)} float64", lambda a=a: torch.linalg.eig(a))
    events(f"eigvals {tuple(shape)} float64", lambda a=a: torch.linalg.eigvals(a))
    ag = a.clone().requires_grad_()
    lam, v = torch.linalg.eig(ag)
    loss = (v @ torch.diag_embed(lam) @ torch.linalg.inv(v)).real.sum()
    events(f"eig backward {tuple(shape)} float64", lambda loss=loss: loss.backward())
    del a, ag, lam, v, loss

a = torch.randn(32768, 32, device=dev, dtype=torch.float64)
b = torch.randn(32768, 32, device=dev, dtype=torch.float64)
events("lstsq (32768, 32) x 32 float64", lambda a=a, b=b: torch.linalg.lstsq(a, b))
a = torch.randn(512, 64, 32, device=dev, dtype=torch.float64)
b = torch.randn(512, 64, 32, device=dev, dtype=torch.float64)
events("lstsq (512, 64, 32) x 32 float64", lambda a=a, b=b: torch.linalg.lstsq(a, b))
a = torch.randn(32, 32, device=dev, dtype=torch.complex128)
b = torch.randn(32, 512, device=dev, dtype=torch.complex128)
events("solve (32, 32) complex128 x 512", lambda a=a, b=b: torch.linalg.solve(a, b))
a = torch.randn(512, 32, 32, device=dev, dtype=torch.complex128)
b = torch.randn(512, 32, 1, device=dev, dtype=torch.complex128)
events("solve (512, 32, 32) complex128 x 1", lambda a=a, b=b: torch.linalg.solve(a, b))
del a, b

for r in (4, 8):
    for n in (1024, 3072, 4096, 32000):
        for bsz in (1, 8):
            m = torch.randn(bsz, n, r, device=dev)
            rr = torch.empty(bsz, r, r, device=dev)
            events(
                f"qr out (b={bsz}, n={n}, r={r}) float32", lambda m=m, rr=rr: torch.linalg.qr(m, out=(m, rr))
            )
            del m, rr
