"""Session 64 (helper ap): what torch 2.11's CUDA kernels do under `torch.use_deterministic_algorithms(True)`.

Part 1 -- which ops raise (alertNotDeterministic) and which run: one line per op, "RAISED <message head>"
or "ok". The twin's table (python/vramscope/_capture.py `_NOT_DETERMINISTIC`, `_META_ALERT_ONLY`) was
ruled from PyTorch's sources and the 2.11 binary's strings; this settles it on the GPU (e.g. floating
`cumsum`, whose 1-d scan is `inclusive_deterministic_scan` in 2.11's ScanUtils.cuh; `reflection_pad2d`
backward, which has `reflection_pad2d_backward_det_out_kernel`; `torch.mode`, whose meta function alerts).
Part 2 -- memory of the deterministic fallbacks (allocated before/after, peak, per op, reset between):
`index_add_` (Indexing.cu: `index.to(kLong)`, `source * alpha`, `index_put_` with accumulate),
`scatter_add_` on a 2-d tensor along dim 1 (`_scatter_via_index_put`: index coordinates or per-dim
indices, then `index_put_` with accumulate), a 1-d floating `cumsum` (`agg` of at most #SMs items), each
beside the same op with deterministic algorithms off. Plain python3, < 20 s, < 4 GB.
The integer scatter_add (pytorch#170274: integers keep atomics) and the stride-0 index (a newer
`_scatter_via_index_put` indexes with it alone) tell which version 2.11 runs."""

import os

import torch
import torch.nn.functional as F

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
dev = "cuda"
torch.manual_seed(0)


def t(name, fn):
    try:
        fn()
        print("alert", name, "ok", flush=True)
    except RuntimeError as e:
        print("alert", name, "RAISED", str(e).split("\n")[0][:100], flush=True)


def part1():
    torch.use_deterministic_algorithms(True)
    x3 = torch.randn(2, 4, 8, 8, 8, device=dev, requires_grad=True)
    x2 = torch.randn(2, 4, 8, 8, device=dev, requires_grad=True)
    x1 = torch.randn(2, 4, 8, device=dev, requires_grad=True)
    g3 = (torch.rand(2, 4, 4, 4, 3, device=dev) * 2 - 1).requires_grad_()
    g2 = (torch.rand(2, 4, 4, 2, device=dev) * 2 - 1).requires_grad_()
    t("grid_sample_2d_bwd", lambda: F.grid_sample(x2, g2, align_corners=False).sum().backward())
    t("grid_sample_3d_bwd", lambda: F.grid_sample(x3, g3, align_corners=False).sum().backward())
    t("avg_pool3d_bwd", lambda: F.avg_pool3d(x3, 2).sum().backward())
    t("max_pool3d_bwd", lambda: F.max_pool3d(x3, 2).sum().backward())
    t("adaptive_avg_pool2d_bwd", lambda: F.adaptive_avg_pool2d(x2, 3).sum().backward())
    t("adaptive_avg_pool3d_bwd", lambda: F.adaptive_avg_pool3d(x3, 3).sum().backward())
    t("adaptive_max_pool2d_bwd", lambda: F.adaptive_max_pool2d(x2, 3).sum().backward())
    t("adaptive_max_pool3d_bwd", lambda: F.adaptive_max_pool3d(x3, 3).sum().backward())
    t("fractional_max_pool2d_bwd", lambda: F.fractional_max_pool2d(x2, 2, output_size=4).sum().backward())
    t("fractional_max_pool3d_bwd", lambda: F.fractional_max_pool3d(x3, 2, output_size=4).sum().backward())
    t("max_unpool2d", lambda: F.max_unpool2d(*F.max_pool2d(x2.detach(), 2, return_indices=True), 2))
    t("linear1d_bwd", lambda: F.interpolate(x1, scale_factor=2, mode="linear").sum().backward())
    t("bilinear_bwd", lambda: F.interpolate(x2, scale_factor=2, mode="bilinear").sum().backward())
    t("bicubic_bwd", lambda: F.interpolate(x2, scale_factor=2, mode="bicubic").sum().backward())
    t("trilinear_bwd", lambda: F.interpolate(x3, scale_factor=2, mode="trilinear").sum().backward())
    t("reflection1d_bwd", lambda: F.pad(x1, (2, 2), mode="reflect").sum().backward())
    t("reflection2d_bwd", lambda: F.pad(x2, (2, 2, 2, 2), mode="reflect").sum().backward())
    t("reflection3d_bwd", lambda: F.pad(x3, (2, 2, 2, 2, 2, 2), mode="reflect").sum().backward())
    t("replication2d_bwd", lambda: F.pad(x2, (2, 2, 2, 2), mode="replicate").sum().backward())
    t("nll_loss", lambda: F.nll_loss(torch.randn(2, 10, device=dev), torch.tensor([1, 2], device=dev)))
    t(
        "nll_loss2d",
        lambda: F.nll_loss(torch.randn(2, 4, 8, 8, device=dev), torch.randint(0, 4, (2, 8, 8), device=dev)),
    )
    lp = torch.randn(20, 2, 6, device=dev).log_softmax(2).requires_grad_()
    tg = torch.randint(1, 6, (2, 5), device=dev)
    t("ctc_bwd", lambda: F.ctc_loss(lp, tg, torch.tensor([20, 20]), torch.tensor([5, 5])).backward())
    eb = torch.nn.EmbeddingBag(10, 4, mode="max").to(dev)
    t("embedding_bag_max_bwd", lambda: eb(torch.randint(0, 10, (4, 3), device=dev)).sum().backward())
    i2 = torch.tensor([1, 2], device=dev)
    t("put_", lambda: torch.zeros(10, device=dev).put_(i2, torch.ones(2, device=dev)))
    t("put_acc", lambda: torch.zeros(10, device=dev).put_(i2, torch.ones(2, device=dev), accumulate=True))
    t("histc", lambda: torch.histc(torch.randn(100, device=dev), 10))
    t(
        "bincount_w",
        lambda: torch.bincount(torch.randint(0, 5, (10,), device=dev), weights=torch.rand(10, device=dev)),
    )
    t("bincount", lambda: torch.bincount(torch.randint(0, 5, (10,), device=dev)))
    t("kthvalue", lambda: torch.kthvalue(torch.randn(10, device=dev), 3))
    t("median_idx", lambda: torch.median(torch.randn(4, 10, device=dev), 1))
    t("nanmedian_idx", lambda: torch.nanmedian(torch.randn(4, 10, device=dev), 1))
    t("mode", lambda: torch.mode(torch.randn(4, 10, device=dev), 1))
    t("cumsum_1d_float", lambda: torch.cumsum(torch.randn(1000, device=dev), 0))
    t("cumsum_2d_float", lambda: torch.cumsum(torch.randn(10, 100, device=dev), 1))
    j = torch.tensor([0, 1, 1], device=dev)
    o3 = torch.ones(3, device=dev)
    t("scatter_reduce_prod", lambda: torch.zeros(4, device=dev).scatter_reduce(0, j, o3, "prod"))
    t("scatter_reduce_amax", lambda: torch.zeros(4, device=dev).scatter_reduce(0, j, o3, "amax"))
    t("scatter_reduce_sum", lambda: torch.zeros(4, device=dev).scatter_reduce(0, j, o3, "sum"))
    t("index_reduce_prod", lambda: torch.zeros(4, device=dev).index_reduce_(0, j, o3, "prod"))
    t("resize_", lambda: torch.empty(4, device=dev).resize_(100))
    torch.use_deterministic_algorithms(False)


def measure(tag, fn):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    print(
        f"mem {tag}: before {before} after {torch.cuda.memory_allocated()} "
        f"peak {torch.cuda.max_memory_allocated()}",
        flush=True,
    )


def part2():
    idx = torch.randint(0, 256, (8, 1_000_000), device=dev)
    src = torch.rand(8, 1_000_000, device=dev)
    out = torch.zeros(8, 256, device=dev)
    out_i = torch.zeros(8, 256, dtype=torch.long, device=dev)
    src_i = torch.ones(8, 1_000_000, dtype=torch.long, device=dev)
    idx_x = idx[:1].expand(8, -1)  # an index broadcast over the other dim (stride 0)
    i1 = torch.randint(0, 1000, (4_000_000,), device=dev)
    i1_32 = i1.int()
    v1 = torch.rand(4_000_000, device=dev)
    t1 = torch.zeros(1000, device=dev)
    c1 = torch.rand(10_000_000, device=dev)
    for det in (False, True):
        torch.use_deterministic_algorithms(det)
        d = "det" if det else "nondet"
        measure(f"scatter_add_2d_dim1 {d}", lambda: out.scatter_add_(1, idx, src))
        measure(f"scatter_add_1d {d}", lambda: t1.scatter_add_(0, i1, v1))
        measure(f"scatter_add_2d_dim1_int64 {d}", lambda: out_i.scatter_add_(1, idx, src_i))
        measure(f"scatter_add_2d_dim1_expanded_index {d}", lambda: out.scatter_add_(1, idx_x, src))
        measure(f"index_add_int64 {d}", lambda: t1.index_add_(0, i1, v1))
        measure(f"index_add_int32 {d}", lambda: t1.index_add_(0, i1_32, v1))
        measure(f"cumsum_1d_10M {d}", lambda: c1.cumsum(0))
        measure(
            f"gather_backward {d}",
            lambda: torch.autograd.grad(src.requires_grad_().gather(1, idx[:, :1000]).sum(), src),
        )
    torch.use_deterministic_algorithms(False)


part1()
part2()
