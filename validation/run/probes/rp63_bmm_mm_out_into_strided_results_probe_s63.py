"""GPU probe (session 63, helper rp): products written into results cuBLAS cannot address.

cuda/Blas.cpp's `baddbmm_out_cuda_impl` computes into `result.transpose(1, 2).clone(Contiguous)`
when neither inner stride of the result is 1 with a leading dimension that fits, and copies it back;
`cublasCommonArgs` does the same for 2-D results (`mm(out=)`, `addmm(out=)`), and an addmm into a
non-contiguous result is not cuBLASLt's (isInputCompliesAddmmCudaLt). The twin (e7fbc264, e6825f53,
python/tests/test_blas_results.py) takes that clone; before it took none. Each line: the case, the
allocations it made (allocation.all.allocated), the bytes requested, and the peak over the start.
Expected on the GPU (the twin's figures): addmm-strided-first 2 35651584 35651584 (cuBLAS's 32 MiB
workspace and the clone), addmm-contiguous-second 1 1048576 1048576 (cuBLASLt's workspace),
transposed-empty 0 0 0, strided 1 8388608 8388608, column-major 0 0 0, baddbmm_-strided 1 2097152
2097152, mm-strided 1 2097152 2097152, mm-rows 0 0 0.

    cd validation/run && python3 probes/rp63_bmm_mm_out_into_strided_results_probe_s63.py
"""

import torch

BF16 = torch.bfloat16
dev = "cuda"


def stats():
    s = torch.cuda.memory_stats()
    return s["allocation.all.allocated"], s["requested_bytes.all.allocated"]


def case(name, setup, op):
    args = setup()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    c0, r0 = stats()
    op(*args)
    torch.cuda.synchronize()
    c1, r1 = stats()
    print(name, c1 - c0, r1 - r0, torch.cuda.max_memory_allocated() - start, flush=True)
    del args


def operands(k=4, b=4096, p=256, q=256):
    x = torch.empty(b, k, p, device=dev, dtype=BF16).transpose(0, 1)
    w = torch.empty(k, q, p, device=dev, dtype=BF16).transpose(-1, -2)
    return x, w


# first of all, before any product: addmm into a strided out takes cuBLAS's gemm (the handle's
# workspace) and the result's clone, not cuBLASLt's gemm_and_bias (isInputCompliesAddmmCudaLt)
case(
    "addmm-strided-first",
    lambda: (
        torch.empty(512, device=dev),
        torch.empty(1024, 256, device=dev),
        torch.empty(256, 512, device=dev),
        torch.empty(1024, 1024, device=dev)[:, ::2],
    ),
    lambda bias, a, b, out: torch.addmm(bias, a, b, out=out),
)
# then a contiguous out: gemm_and_bias, whose cuBLASLt workspace comes now
case(
    "addmm-contiguous-second",
    lambda: (
        torch.empty(512, device=dev),
        torch.empty(1024, 256, device=dev),
        torch.empty(256, 512, device=dev),
        torch.empty(1024, 512, device=dev),
    ),
    lambda bias, a, b, out: torch.addmm(bias, a, b, out=out),
)
# the cuBLAS handles' workspaces (bmm and mm, fp32 and bf16)
torch.bmm(torch.empty(2, 4, 4, device=dev), torch.empty(2, 4, 4, device=dev))
torch.mm(torch.empty(4, 4, device=dev), torch.empty(4, 4, device=dev))
torch.bmm(torch.empty(2, 4, 4, device=dev, dtype=BF16), torch.empty(2, 4, 4, device=dev, dtype=BF16))

case(
    "transposed-empty",
    lambda: (*operands(), torch.empty(4096, 4, 256, device=dev, dtype=BF16).transpose(0, 1)),
    lambda x, w, out: torch.bmm(x, w, out=out),
)
case(
    "strided",
    lambda: (*operands(), torch.empty(4, 4096, 512, device=dev, dtype=BF16)[:, :, ::2]),
    lambda x, w, out: torch.bmm(x, w, out=out),
)
case(
    "column-major",
    lambda: (*operands(), torch.empty(4, 256, 4096, device=dev, dtype=BF16).transpose(1, 2)),
    lambda x, w, out: torch.bmm(x, w, out=out),
)
case(
    "baddbmm_-strided",
    lambda: (torch.empty(4, 1024, 512, device=dev, dtype=BF16)[:, :, ::2], *operands(b=1024)),
    lambda s, x, w: s.baddbmm_(x, w),
)
case(
    "mm-strided",
    lambda: (
        torch.empty(1024, 256, device=dev),
        torch.empty(256, 512, device=dev),
        torch.empty(1024, 1024, device=dev)[:, ::2],
    ),
    lambda a, b, out: torch.mm(a, b, out=out),
)
case(
    "mm-rows",
    lambda: (
        torch.empty(1024, 256, device=dev),
        torch.empty(256, 512, device=dev),
        torch.empty(1024, 1024, device=dev)[:, :512],
    ),
    lambda a, b, out: torch.mm(a, b, out=out),
)
print("done")
