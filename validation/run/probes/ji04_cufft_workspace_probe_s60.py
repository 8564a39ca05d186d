"""GPU probe for blind268/ji04 (session 60, helper rp; not run yet): cuFFT's work area for the plans
fastMRI's VarNet runs. The twin takes cuFFT's work area (`at::empty({workspace_size})` in
`_exec_fft`, cuda/SpectralOps.cpp) from a table of measured plans (python/vramscope/_kernels/fft.py
`_CUFFT_WORKSPACE`) and as zero for every plan not listed, silently: ji04's 2-D complex-to-complex
float32 plans of (640, 368) (368 = 2^4 x 23, a factor cuFFT does not run in one radix kernel, like
the (64, 64, 46) plans that did need one real signal an item) are not listed. This prints, per plan
and batch, every allocation the call makes beyond its output (from the memory history), so the
table can take the measured sizes.

Run: python validation/run/probes/ji04_cufft_workspace_probe_s60.py [OUTDIR]
(writes OUTDIR/ji04_cufft.pickle, the memory history, when OUTDIR is given)."""

import pickle
import sys

import torch

torch.cuda.memory._record_memory_history(max_entries=100000)
cases = [
    # (label, batch, (H, W), dtype, fn)
    (
        "fftn c2c 2-D",
        16,
        (640, 368),
        torch.complex64,
        lambda x: torch.fft.fftn(x, dim=(-2, -1), norm="ortho"),
    ),
    (
        "ifftn c2c 2-D",
        16,
        (640, 368),
        torch.complex64,
        lambda x: torch.fft.ifftn(x, dim=(-2, -1), norm="ortho"),
    ),
    (
        "fftn c2c 2-D",
        32,
        (640, 368),
        torch.complex64,
        lambda x: torch.fft.fftn(x, dim=(-2, -1), norm="ortho"),
    ),
    (
        "ifftn c2c 2-D",
        32,
        (640, 368),
        torch.complex64,
        lambda x: torch.fft.ifftn(x, dim=(-2, -1), norm="ortho"),
    ),
    ("fftn c2c 2-D", 1, (640, 368), torch.complex64, lambda x: torch.fft.fftn(x, dim=(-2, -1), norm="ortho")),
    (
        "fftn c2c 2-D",
        16,
        (640, 320),
        torch.complex64,
        lambda x: torch.fft.fftn(x, dim=(-2, -1), norm="ortho"),
    ),
    (
        "fftn c2c 2-D",
        16,
        (368, 368),
        torch.complex64,
        lambda x: torch.fft.fftn(x, dim=(-2, -1), norm="ortho"),
    ),
]
for label, batch, (h, w), dtype, fn in cases:
    torch.backends.cuda.cufft_plan_cache.clear()
    x = torch.randn(batch, h, w, dtype=dtype, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    n0 = len(torch.cuda.memory._snapshot()["device_traces"][0])
    y = fn(x)
    torch.cuda.synchronize()
    ev = torch.cuda.memory._snapshot()["device_traces"][0][n0:]
    allocs = [e["size"] for e in ev if e["action"] == "alloc"]
    out = y.numel() * y.element_size()
    print(
        f"{label} batch {batch} ({h}, {w}) {dtype}: "
        f"peak above start {torch.cuda.max_memory_allocated() - base}, "
        f"output {out}, allocations {allocs}, extra over the output {sum(allocs) - out}"
    )
    del x, y
if len(sys.argv) > 1:
    with open(f"{sys.argv[1]}/ji04_cufft.pickle", "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
