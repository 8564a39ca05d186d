"""The scratch memory of data-sized kernels, swept over sizes: CUB scans (`cumsum`), radix sorts
(`sort`, `argsort`), the sort-based `index_put_(accumulate=True)`, `embedding_dense_backward`, and
`_grouped_mm` and the fp8 rowwise `scaled_grouped_mm`. A plain script: on a GPU it prints the GPU's
figures, under `vramscope run` the twin's.

    python scratch_sweep.py > gpu.jsonl             (on the GPU)
    vramscope run --gpu h200 --quiet scratch_sweep.py > twin.jsonl

One JSON line per case: the op's allocations as the memory history lists them (`sizes`: the rounded
block sizes, in order), and the requested bytes of everything the op allocated beyond its outputs
(`extra_requested`), from `requested_bytes.all.allocated` around the call.
"""

import torch
from sweep_case import case

dev = "cuda"


NS = [1, 8, 1000, 2048, 4096, 16384, 24576, 49152, 65536, 98304, 262144, 1 << 20, 1 << 22, 1 << 24]

for dt in (torch.int64, torch.float32, torch.int32, torch.bool, torch.bfloat16):
    for n in NS:
        case(
            f"cumsum {str(dt)[6:]} {n}",
            (torch.ones(n, dtype=dt, device=dev),),
            lambda x: torch.cumsum(x, 0),
        )
for shape in ((12, 2048), (24, 2048), (1, 2048), (2048, 12)):
    case(
        f"cumsum bool {shape} -1",
        (torch.ones(shape, dtype=torch.bool, device=dev),),
        lambda x: x.cumsum(-1),
    )

for dt in (torch.int64, torch.float32, torch.bfloat16, torch.int32):
    for n in NS[2:]:
        case(
            f"sort {str(dt)[6:]} {n}",
            (torch.arange(n, device=dev).to(dt).flip(0),),
            lambda x: torch.sort(x),
        )
        case(
            f"sort stable {str(dt)[6:]} {n}",
            (torch.arange(n, device=dev).to(dt).flip(0),),
            lambda x: torch.sort(x, stable=True),
        )
for shape in ((8, 4096), (64, 32000), (4, 128256), (16384, 8)):
    case(
        f"sort 2d float32 {shape}",
        (torch.randn(shape, device=dev),),
        lambda x: torch.sort(x, dim=-1, descending=True),
    )
    case(
        f"argsort 2d float32 {shape}",
        (torch.randn(shape, device=dev),),
        lambda x: torch.argsort(x, dim=-1),
    )

for n in (1024, 24576, 49152, 98304, 1 << 20):
    for width in (None, 1024):
        case(
            f"index_put_ acc {n} {width}",
            (
                torch.zeros((65536,) if width is None else (65536, width), device=dev),
                torch.randint(0, 65536, (n,), device=dev),
                torch.ones((n,) if width is None else (n, width), device=dev),
            ),
            lambda a, i, v: a.index_put_((i,), v, accumulate=True),
        )

for n in (4096, 24576, 32768, 49152, 98304, 262144):
    for pad in (-1, 1):
        for vocab in (32000, 50265):
            case(
                f"embedding_dense_backward {n} {vocab} {pad}",
                (
                    torch.ones(n, 1024, device=dev, dtype=torch.bfloat16),
                    torch.randint(0, vocab, (n,), device=dev),
                ),
                lambda g, i, vocab=vocab, pad=pad: torch.ops.aten.embedding_dense_backward(
                    g, i, vocab, pad, False
                ),
            )

for groups in (2, 4, 8, 16, 64):
    for m in (512, 4096):
        case(
            f"_grouped_mm {groups} {m}",
            (
                torch.ones(m, 1024, device=dev, dtype=torch.bfloat16),
                torch.ones(groups, 1024, 2048, device=dev, dtype=torch.bfloat16).transpose(-2, -1),
                torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * (m // groups),
            ),
            lambda a, b, offs: torch._grouped_mm(a, b.transpose(-2, -1), offs=offs),
        )

# the sm_90 fp8 rowwise grouped GEMM (`F.scaled_grouped_mm`, ScaledGroupMM.cu): its CUTLASS workspace,
# which the twin takes as the bf16 kernel's 512 bytes an SM (blind265/jf01)
for groups in (2, 4, 8, 16, 64):
    for m in (512, 4096):
        case(
            f"scaled_grouped_mm rowwise {groups} {m}",
            (
                torch.ones(m, 1024, device=dev).to(torch.float8_e4m3fn),
                torch.ones(groups, 2048, 1024, device=dev).to(torch.float8_e4m3fn),
                torch.ones(m, device=dev),
                torch.ones(groups, 2048, device=dev),
                torch.arange(1, groups + 1, device=dev, dtype=torch.int32) * (m // groups),
            ),
            lambda a, b, sa, sb, offs: torch.nn.functional.scaled_grouped_mm(
                a,
                b.transpose(-2, -1),
                sa,
                torch.nn.functional.ScalingType.RowWise,
                sb,
                torch.nn.functional.ScalingType.RowWise,
                offs=offs,
            ),
        )

for shape, k, dt in (
    ((1_000_000,), 100, torch.float32),
    ((8, 50257), 50, torch.float32),
    ((4, 128256), 50, torch.bfloat16),
    ((64, 32000), 10, torch.float32),
    ((1000, 1000), 5, torch.float32),
    ((512, 1000), 5, torch.float32),
    ((1, 20000), 1, torch.float32),
    ((16_000_000,), 1000, torch.float32),
    ((4096, 1024), 16, torch.float32),
    ((8192, 512), 8, torch.float32),
    ((2000, 50000), 4, torch.bfloat16),
):
    case(
        f"topk {str(dt)[6:]} {shape} {k}",
        (torch.randn(shape, device=dev).to(dt),),
        lambda x, k=k: torch.topk(x, k),
    )
