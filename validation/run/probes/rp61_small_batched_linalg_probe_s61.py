"""GPU probe (session 61, helper rp; not run yet): the small batched linear algebra research code runs
beside blind271's idioms -- Kabsch alignment of predicted and true C-alpha coordinates (AlphaFold/EGNN
RMSD: `torch.linalg.svd` of (B, 3, 3) covariances and `torch.linalg.det` for the reflection sign), random
rotation frames by `torch.linalg.qr` of (N, 3, 3) Gaussian matrices. Each case prints every allocation
the op makes (from the memory history: size, and whether it was freed inside the op) and what is left.

What the twin (`vramscope run --gpu h200`) prints, reasoned from PyTorch's source:
- qr (768, 3, 3) float32: Q 27,648, R 27,648, tau 9,216, then `geqrf_batched_cublas`'s two
  `get_device_pointers` arrays of 6,144 bytes (freed), then orgqr's int32 info (4) and 768 looped
  workspaces of 132,224 bytes (each freed), tau freed (geqrf_kernel picks cuBLAS's batched geqrf for
  <= 256 rows and >= max(2, m / 16) matrices; cuda/linalg/BatchLinearAlgebra.cpp). Before session 61
  the twin named this path unmeasured.
- svd (64, 3, 3) and (4096, 3, 3) float32 (gesvdjBatched): U, Vh, S, int32 infos, the column-major
  clone, then gesvdjBatched's workspace -- NOT in the twin's table (it names it unmeasured and counts
  nothing); every size measured so far took 992 elements (3,968 bytes float32, 7,936 float64), so
  this prints whether (64, 3, 3) and (4096, 3, 3) do too.
- det (64, 3, 3): lu_factor_batched_cublas (one 512-byte pointer array) and the reductions.
The twin's lines at e37eb0b9 (the GPU's should equal them but for the gesvdjBatched workspaces):
  qr (768, 3, 3) torch.float32: 774 allocations [27648 x2, 9216 (freed), 6144 (freed) x2, 4 (freed),
    132224 (freed) x768]; left 55296, peak above start 197632
  qr (64, 3, 3) torch.float32: 70 allocations [2304 x2, 768 (freed), 512 (freed) x2, 4 (freed),
    132224 (freed) x64]; left 5120, peak above start 139264
  svd (64, 3, 3) torch.float32: 6 allocations [2304 x2, 768, 256 (freed), 2304 (freed), 1 (freed)];
    left 6144, peak above start 9216
  svd (4096, 3, 3) torch.float32: 6 allocations [147456 x2, 49152, 16384 (freed), 147456 (freed),
    1 (freed)]; left 344064, peak above start 507904
  svd (64, 3, 3) torch.float64: 6 allocations [4608 x2, 1536, 256 (freed), 4608 (freed), 1 (freed)];
    left 10752, peak above start 15872
  svd (256, 4, 4) torch.float32: 6 allocations [16384 x2, 4096, 1024 (freed), 16384 (freed),
    1 (freed)]; left 36864, peak above start 54272
  det (64, 3, 3) torch.float32: 10 allocations [256, 2304 (freed), 768 (freed), 256 (freed),
    512 (freed), 256 (freed), 12 (freed), 192 (freed), 512 (freed), 1536 (freed)]; left 512, peak
    above start 8192
(each svd line lacks the gesvdjBatched workspace the twin names unmeasured; a 3,968-byte one freed
after the clone would be the measured sizes' pattern).
Run: python validation/run/probes/rp61_small_batched_linalg_probe_s61.py"""

import torch

torch.cuda.memory._record_memory_history(max_entries=200000)
torch.manual_seed(0)
x = torch.randn(64, 64, device="cuda")
y = x @ x  # the cuBLAS handle and its workspace before the cases

cases = [
    ("qr", (768, 3, 3), torch.float32, torch.linalg.qr),
    ("qr", (64, 3, 3), torch.float32, torch.linalg.qr),
    ("svd", (64, 3, 3), torch.float32, torch.linalg.svd),
    ("svd", (4096, 3, 3), torch.float32, torch.linalg.svd),
    ("svd", (64, 3, 3), torch.float64, torch.linalg.svd),
    ("svd", (256, 4, 4), torch.float32, torch.linalg.svd),
    ("det", (64, 3, 3), torch.float32, torch.linalg.det),
]
for name, shape, dtype, fn in cases:
    a = torch.randn(*shape, device="cuda", dtype=dtype)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    n0 = len(torch.cuda.memory._snapshot()["device_traces"][0])
    out = fn(a)
    torch.cuda.synchronize()
    ev = torch.cuda.memory._snapshot()["device_traces"][0][n0:]
    live = {}
    seq = []
    for e in ev:
        if e["action"] == "alloc":
            live[e["addr"]] = len(seq)
            seq.append([e["size"], "kept"])
        elif e["action"] == "free_requested" and e["addr"] in live:
            seq[live.pop(e["addr"])][1] = "freed"
    runs = []  # consecutive equal entries run-length encoded
    for s, k in seq:
        label = f"{s}{'' if k == 'kept' else ' (freed)'}"
        if runs and runs[-1][0] == label:
            runs[-1][1] += 1
        else:
            runs.append([label, 1])
    sizes = ", ".join(label if c == 1 else f"{label} x{c}" for label, c in runs)
    print(
        f"{name} {tuple(shape)} {dtype}: {len(seq)} allocations [{sizes}]; "
        f"left {torch.cuda.memory_allocated() - base}, "
        f"peak above start {torch.cuda.max_memory_allocated() - base}"
    )
    del out, a
