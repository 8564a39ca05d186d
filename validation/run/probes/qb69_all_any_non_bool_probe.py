"""GPU probe (session 69, helper qb): what `all()` / `any()` allocate beside their result, by dtype and
size. ATen's `allany_impl` (aten/src/ATen/native/ReduceOps.cpp) fills the result of an empty input, copies
a one-element input with `result.copy_(self.view_as(result).to(kBool))` (a one-byte bool temporary unless
the input is bool), and otherwise reduces on CUDA in the input's own dtype (`get_allany_iter`:
`make_reduction(..., self.scalar_type())`, no cast) with `gpu_reduce_kernel<scalar_t, bool>`, whose global
buffer and semaphores depend on the shape, not on the input's dtype. Each line: the allocations the call
made and their requested bytes, the result's own block counted out (cumulative `allocation.all.allocated`
and `requested_bytes.all.allocated` of `torch.cuda.memory_stats()`). The twin prints the same lines under
`vramscope run --gpu h100` (at qb-s69 ef30b4f2: one-element non-bool 1 alloc / 1 byte, bool 0 / 0; the
(8, 512, 768) reductions 2 / 388 for every dtype, the (64, 1024, 1024) ones 2 / 532; `.all(0)` of (8, 512,
768) 0 / 0). The H100 (session 69's first call, fixtures/run/probes/qb69_all_any_non_bool_probe_h100.txt)
read every one-element line so and the reductions' buffers as 384 (528) x the element size: the kernel
accumulates in the input's type. The twin's lines now (qb69_all_any_non_bool_probe_twin_h100.out) equal the
H100's, all 79.

Run: python3 validation/run/probes/qb69_all_any_non_bool_probe.py"""

import torch


def stats():
    s = torch.cuda.memory_stats()
    return s["allocation.all.allocated"], s["requested_bytes.all.allocated"]


def case(name, x, fn):
    torch.cuda.synchronize()
    n0, r0 = stats()
    out = fn(x)
    torch.cuda.synchronize()
    n1, r1 = stats()
    res = out.untyped_storage().nbytes()
    print(f"{name} {str(x.dtype)[6:]} {tuple(x.shape)}: allocations {n1 - n0 - 1} requested {r1 - r0 - res}")
    del out


for dtype in (torch.bool, torch.int32, torch.int64, torch.float32, torch.bfloat16, torch.uint8):
    for shape in ((1,), (), (1, 1)):
        x = torch.ones(shape, device="cuda", dtype=dtype)
        case("all()", x, lambda t: t.all())
        case("any()", x, lambda t: t.any())
        if x.dim():
            case("all(-1)", x, lambda t: t.all(-1))
    x = torch.ones(8, 512, 768, device="cuda", dtype=dtype)
    case("all()", x, lambda t: t.all())
    case("any()", x, lambda t: t.any())
    case("all(0)", x, lambda t: t.all(0))
    case("any(-1)", x, lambda t: t.any(-1))
    del x
for dtype in (torch.bool, torch.int32, torch.float16):
    # a larger reduction split into more blocks, and a transposed (non-contiguous) input
    x = torch.ones(64, 1024, 1024, device="cuda", dtype=dtype)
    case("any()", x, lambda t: t.any())
    case("all() of .mT", x, lambda t: t.mT.all())
    del x
out = torch.empty((), device="cuda", dtype=torch.bool)
x = torch.ones(1, device="cuda", dtype=torch.int32)
torch.cuda.synchronize()
n0, r0 = stats()
torch.all(x, out=out)
torch.cuda.synchronize()
n1, r1 = stats()
print(f"all(out=) int32 (1,): allocations {n1 - n0} requested {r1 - r0}")
