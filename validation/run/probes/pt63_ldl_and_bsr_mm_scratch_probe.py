"""Session 63 probe (helper pt) for blind280/ju02 and ju03: the device scratch of
`torch.linalg.ldl_factor_ex` / `ldl_solve` (cuSOLVER sytrf / sytrs) and of BSR @ strided `torch.mm`
(cuSPARSE bsrmm), and what `torch.sparse_bsr_tensor` over given parts allocates. For each case: the
allocated bytes before, after, and the peak during the call (reset just before), and the outputs'
storage bytes, so scratch = peak - before - outputs. Plain python3, under 30 s, under 2 GB."""

import torch

dev = "cuda"
torch.manual_seed(0)


def measure(tag, fn, *args):
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    after = torch.cuda.memory_allocated()
    outs = out if isinstance(out, tuple) else (out,)
    nbytes = 0
    for t in outs:
        if isinstance(t, torch.Tensor):
            if t.layout == torch.strided:
                nbytes += t.untyped_storage().nbytes()
    print(
        f"{tag}: before {before} after {after} peak {peak} delta_after {after - before} "
        f"scratch_peak {peak - after} out_strided_bytes {nbytes}"
    )
    return out


for dtype in (torch.float32, torch.float64):
    for n in (64, 320, 1024):
        for batch in (1, 8, 512):
            if n * n * batch * 8 > 600 * 2**20:
                continue
            a = torch.randn(batch, n, n, device=dev, dtype=dtype)
            a = a + a.mT
            rhs = torch.randn(batch, n, 1, device=dev, dtype=dtype)
            LD, piv, info = measure(
                f"ldl_factor_ex {dtype} n {n} batch {batch}", torch.linalg.ldl_factor_ex, a
            )
            measure(f"ldl_solve {dtype} n {n} batch {batch} k 1", torch.linalg.ldl_solve, LD, piv, rhs)
            if batch == 1:
                a2 = a[0]
                measure(f"ldl_factor_ex 2d {dtype} n {n}", torch.linalg.ldl_factor_ex, a2)
            del a, rhs, LD, piv, info

BS = 64
for rows, cols, k, tokens in ((128, 32, 8, 8192), (32, 128, 32, 8192), (16, 8, 4, 256), (128, 32, 8, 1000)):
    crow = torch.arange(0, rows * k + 1, k, device=dev)
    col = torch.rand(rows, cols, device=dev).topk(k, 1).indices.sort(1).values.flatten()
    vals = torch.randn(rows * k, BS, BS, device=dev)
    W = measure(
        f"sparse_bsr_tensor {rows}x{cols} blocks k {k}",
        torch.sparse_bsr_tensor,
        crow,
        col,
        vals,
        (rows * BS, cols * BS),
    )
    h = torch.randn(cols * BS, tokens, device=dev)
    measure(
        f"mm bsr {rows * BS}x{cols * BS} nnzb {rows * k} @ dense {cols * BS}x{tokens} row-major",
        torch.mm,
        W,
        h,
    )
    ht = torch.randn(tokens, cols * BS, device=dev).t()
    measure(
        f"mm bsr {rows * BS}x{cols * BS} nnzb {rows * k} @ dense {cols * BS}x{tokens} col-major",
        torch.mm,
        W,
        ht,
    )
    del W, h, ht, crow, col, vals
print("done")
