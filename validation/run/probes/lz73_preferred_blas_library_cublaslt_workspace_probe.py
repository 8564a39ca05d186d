"""GPU probe (session 73, helper lz): what `torch.backends.cuda.preferred_blas_library("cublaslt")`
allocates. CUDABlas.cpp's `gemm_internal`/`bgemm_internal` run every GEMM through
`bgemm_internal_cublaslt` when cuBLASLt is preferred, which takes cuBLASLt's own 1 MiB workspace per
(handle, stream) (`CublasLtWorkspace`) beside the handle's 32 MiB; the twin before 84cb53c9 made it only
for `addmm`'s `gemm_and_bias`. Each line: the case, the allocations it made (allocation.all.allocated),
the bytes requested, and its peak over the start. The twin's lines are in
`lz73_preferred_blas_library_cublaslt_workspace_probe_twin_h100.out`; a line that differs decides:
mm-cublaslt / bmm-side-stream-cublaslt / backward-cublaslt (the 1 MiB workspace on a plain GEMM, on a
new stream, on the autograd thread), fp16-accumulation (no memory of its own).

    cd validation/run && python3 probes/lz73_preferred_blas_library_cublaslt_workspace_probe.py
"""

import torch

dev = "cuda"


def stats():
    s = torch.cuda.memory_stats()
    return s["allocation.all.allocated"], s["requested_bytes.all.allocated"]


def case(name, op):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    c0, r0 = stats()
    out = op()
    torch.cuda.synchronize()
    c1, r1 = stats()
    print(name, c1 - c0, r1 - r0, torch.cuda.max_memory_allocated() - start, flush=True)
    return out


a = torch.empty(256, 512, device=dev)
b = torch.empty(512, 1024, device=dev)
x = torch.randn(64, 512, device=dev, requires_grad=True)
w = torch.randn(512, 256, device=dev, requires_grad=True)
h = torch.empty(256, 512, device=dev, dtype=torch.float16)
hb = torch.empty(512, 1024, device=dev, dtype=torch.float16)
print("preferred", torch.backends.cuda.preferred_blas_library())
del_ = case("mm-cublas-first", lambda: torch.mm(a, b))
del_ = case("mm-cublas-second", lambda: torch.mm(a, b))
torch.backends.cuda.preferred_blas_library("cublaslt")
del_ = case("mm-cublaslt", lambda: torch.mm(a, b))
del_ = case("mm-cublaslt-second", lambda: torch.mm(a, b))
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    del_ = case("bmm-side-stream-cublaslt", lambda: torch.bmm(a[None], b[None]))
torch.cuda.current_stream().wait_stream(side)
del_ = None
y = torch.mm(x, w)
case("backward-cublaslt", lambda: y.sum().backward())
torch.backends.cuda.preferred_blas_library("cublas")
x.grad = w.grad = None
y = torch.mm(x, w)
case("backward-cublas-after", lambda: y.sum().backward())
torch.backends.cuda.matmul.allow_fp16_accumulation = True
del_ = case("fp16-accumulation-half-mm", lambda: torch.mm(h, hb))
torch.backends.cuda.preferred_blas_library("cublaslt")
del_ = case("fp16-accumulation-half-mm-cublaslt", lambda: torch.mm(h, hb))
print("end allocated", torch.cuda.memory_allocated(), "reserved", torch.cuda.memory_reserved())
