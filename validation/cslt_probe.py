"""What cuSPARSELt's 2:4 semi-structured ops allocate on the GPU, for the twin's rules (the twin has
none: `aten::_cslt_compress` has no meta kernel, and the compressed size and the buffers come from
cuSPARSELt's `cusparseLtSpMMACompressedSize2` and plan queries, aten/src/ATen/native/sparse/cuda/
cuSPARSELtOps.cpp).

    python validation/cslt_probe.py > fixtures/run/sparse/cslt_probe_h200.jsonl

One JSON line per case: for `torch._cslt_compress(W)` of a 2:4-pruned (m, k) matrix, the packed
tensor's shape, dtype and bytes and the allocator's deltas (allocated after, peak during: the
compression buffer); for `torch._cslt_sparse_mm(packed, B)` with B (k, n), the output's shape and
strides and the deltas (peak less output: the plan's workspace); and `to_sparse_semi_structured` in an
nn.Linear's forward (what `F.linear` runs on a `SparseSemiStructuredTensorCUSPARSELT` weight). Each case
starts from an emptied cache and a reset peak."""

import json

import torch
from torch.sparse import SparseSemiStructuredTensor, to_sparse_semi_structured

SparseSemiStructuredTensor._FORCE_CUTLASS = False
dev = "cuda"


def pruned(m, k, dtype):
    mask = torch.tensor([0, 0, 1, 1], dtype=torch.bool, device=dev).tile((m, k // 4))
    return (torch.randn(m, k, device=dev).to(dtype) * mask).contiguous()


def fresh():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def emit(base, **rec):
    rec.update(allocated=torch.cuda.memory_allocated() - base, peak=torch.cuda.max_memory_allocated() - base)
    print(json.dumps(rec), flush=True)


DTYPES = [torch.float16, torch.bfloat16, torch.int8, torch.float8_e4m3fn]
SHAPES = [(128, 128), (768, 768), (1024, 1024), (3072, 768), (768, 3072), (4096, 4096), (11008, 4096)]
for dtype in DTYPES:
    for m, k in SHAPES:
        try:
            w = pruned(m, k, torch.float16).to(dtype)
            base = fresh()
            packed = torch._cslt_compress(w)
            torch.cuda.synchronize()
            emit(
                base,
                op="_cslt_compress",
                dtype=str(dtype),
                m=m,
                k=k,
                packed_shape=list(packed.shape),
                packed_dtype=str(packed.dtype),
                packed_bytes=packed.untyped_storage().nbytes(),
            )
            for n in (1, 128, 4096):
                b = torch.randn(k, n, device=dev).to(dtype)
                # fp8 and int8 want B column-major (cuSPARSELtOps.cpp); the others take either
                if dtype in (torch.int8, torch.float8_e4m3fn):
                    b = b.t().contiguous().t()
                out_dtype = torch.float16 if dtype in (torch.int8, torch.float8_e4m3fn) else None
                base = fresh()
                try:
                    out = torch._cslt_sparse_mm(packed, b, out_dtype=out_dtype)
                    torch.cuda.synchronize()
                    emit(
                        base,
                        op="_cslt_sparse_mm",
                        dtype=str(dtype),
                        m=m,
                        k=k,
                        n=n,
                        out_shape=list(out.shape),
                        out_stride=list(out.stride()),
                        out_bytes=out.untyped_storage().nbytes(),
                    )
                    del out
                except Exception as e:
                    emit(0, op="_cslt_sparse_mm", dtype=str(dtype), m=m, k=k, n=n, error=repr(e)[:300])
                del b
            del packed, w
        except Exception as e:
            emit(0, op="_cslt_compress", dtype=str(dtype), m=m, k=k, error=repr(e)[:300])

for dtype in (torch.float16, torch.bfloat16):
    for (m, k), tokens in (((1024, 1024), 512), ((3072, 768), 2048), ((4096, 4096), 128)):
        try:
            lin = torch.nn.Linear(k, m, dtype=dtype, device=dev).eval()
            lin.weight = torch.nn.Parameter(pruned(m, k, dtype), requires_grad=False)
            base = fresh()
            lin.weight = torch.nn.Parameter(to_sparse_semi_structured(lin.weight), requires_grad=False)
            torch.cuda.synchronize()
            emit(base, op="to_sparse_semi_structured", dtype=str(dtype), m=m, k=k)
            x = torch.randn(tokens, k, device=dev, dtype=dtype)
            base = fresh()
            with torch.inference_mode():
                y = lin(x)
            torch.cuda.synchronize()
            emit(
                base,
                op="sparse_linear",
                dtype=str(dtype),
                m=m,
                k=k,
                tokens=tokens,
                out_shape=list(y.shape),
                out_stride=list(y.stride()),
            )
            del lin, x, y
        except Exception as e:
            emit(0, op="sparse_linear", dtype=str(dtype), m=m, k=k, tokens=tokens, error=repr(e)[:300])
