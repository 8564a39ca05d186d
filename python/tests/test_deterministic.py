"""`torch.use_deterministic_algorithms(True)` on the simulated GPU: the CUDA kernels that alert
(`Context::alertNotDeterministic`, `alertCuBLASConfigNotDeterministic`) raise as on the GPU."""

from __future__ import annotations

import os

import pytest
import torch
import vramscope


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def test_cublas_gemm_raises_without_a_deterministic_workspace_config(deterministic, monkeypatch):
    # Context.cpp `alertCuBLASConfigNotDeterministic`, called by CUDABlas.cpp's gemm, bgemm and gemv
    # before the handle: CUBLAS_WORKSPACE_CONFIG must be ":4096:8" or ":16:8" (read at the first call)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    with vramscope.capture(gpu="h100"):
        a = torch.empty(64, 64, device="cuda")
        for f in (lambda: a @ a, lambda: torch.bmm(a[None], a[None]), lambda: a @ a[0]):
            with pytest.raises(RuntimeError, match="CUBLAS_WORKSPACE_CONFIG=:4096:8"):
                f()
        # no handle was taken: no cuBLAS workspace
        assert torch.cuda.memory_allocated() == 64 * 64 * 4
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    with vramscope.capture(gpu="h100"):
        a = torch.empty(64, 64, device="cuda")
        assert (a @ a).shape == (64, 64)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
    torch.use_deterministic_algorithms(True, warn_only=True)
    with vramscope.capture(gpu="h100"):
        a = torch.empty(64, 64, device="cuda")
        with pytest.warns(UserWarning, match="Deterministic behavior was enabled"):
            a @ a


def test_nondeterministic_cuda_kernels_alert(deterministic, monkeypatch):
    # AdaptiveAveragePooling.cu, NLLLoss2d.cu (a reduced loss); a floating cumsum does not alert in
    # torch 2.11 (ScanUtils.cuh `scan_dim`: `inclusive_deterministic_scan`)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    with vramscope.capture(gpu="h100"):
        x = torch.randn(2, 3, 16, 16, device="cuda", requires_grad=True)
        y = torch.nn.functional.adaptive_avg_pool2d(x, 5)
        with pytest.raises(RuntimeError, match=r"^adaptive_avg_pool2d_backward_cuda does not have"):
            y.sum().backward()
        logits = torch.randn(2, 4, 8, 8, device="cuda")
        target = torch.zeros(2, 8, 8, dtype=torch.long, device="cuda")
        with pytest.raises(RuntimeError, match=r"^nll_loss2d_forward_out_cuda_template"):
            torch.nn.functional.cross_entropy(logits, target)
        assert torch.nn.functional.cross_entropy(logits, target, reduction="none").shape == (2, 8, 8)
        assert torch.rand(100, device="cuda").cumsum(0).shape == (100,)
        assert torch.rand(4, 100, device="cuda").cumsum(1).shape == (4, 100)
        assert torch.arange(100, device="cuda").cumsum(0).shape == (100,)
        # interpolate's bilinear mode takes its decomposition under deterministic algorithms
        # (torch/nn/functional.py), whose backward is index_put with accumulate: no alert
        torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear").sum().backward()
        # a 1 x 1 adaptive average is a mean (AdaptiveAveragePooling.cpp)
        torch.nn.functional.adaptive_avg_pool2d(x, 1).sum().backward()


def test_a_meta_kernels_alert_raises_after_the_same_call_ran_without_determinism():
    # MaxUnpooling.cu's `alertNotDeterministic("max_unpooling2d_forward_out")` at every call on the
    # GPU; the twin's meta kernel (the decomposition) alerts, and its cache of meta results kept the
    # shapes of a call made before `use_deterministic_algorithms(True)`, which then ran on
    with vramscope.capture(gpu="h100"):
        x = torch.empty(2, 4, 8, 8, device="cuda")
        indices = torch.zeros(2, 4, 8, 8, dtype=torch.long, device="cuda")
        assert torch.nn.functional.max_unpool2d(x, indices, 2).shape == (2, 4, 16, 16)
        torch.use_deterministic_algorithms(True)
        try:
            for _ in range(2):
                with pytest.raises(RuntimeError, match=r"^max_unpooling2d_forward_out does not have"):
                    torch.nn.functional.max_unpool2d(x, indices, 2)
        finally:
            torch.use_deterministic_algorithms(False)
        assert torch.nn.functional.max_unpool2d(x, indices, 2).shape == (2, 4, 16, 16)


def test_more_nondeterministic_cuda_kernels_alert(deterministic, monkeypatch):
    # torch 2.11's alerting kernels beyond the first table (found by blind286 probing): 3-d grid
    # sampling (GridSampler.cpp), 3-d and adaptive-max pooling backwards, fractional max pooling,
    # 1-d linear upsampling, 1-d / 3-d reflection padding, CTC's backward (LossCTC.cu), max-mode
    # EmbeddingBag's backward, weighted bincount (SummaryOps.cu) and put_ on CUDA
    # (TensorAdvancedIndexing.cpp)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    F = torch.nn.functional
    with vramscope.capture(gpu="h100"):
        x3 = torch.randn(2, 4, 8, 8, 8, device="cuda", requires_grad=True)
        x2 = torch.randn(2, 4, 8, 8, device="cuda", requires_grad=True)
        x1 = torch.randn(2, 4, 8, device="cuda", requires_grad=True)
        grid = torch.zeros(2, 4, 4, 4, 3, device="cuda", requires_grad=True)
        cases = {
            "grid_sampler_3d_backward_cuda": lambda: F.grid_sample(x3, grid, align_corners=False),
            "avg_pool3d_backward_cuda": lambda: F.avg_pool3d(x3, 2),
            "max_pool3d_with_indices_backward_cuda": lambda: F.max_pool3d(x3, 2),
            "adaptive_avg_pool3d_backward_cuda": lambda: F.adaptive_avg_pool3d(x3, 3),
            "adaptive_max_pool2d_backward_cuda": lambda: F.adaptive_max_pool2d(x2, 3),
            "fractional_max_pool2d_backward_cuda": lambda: F.fractional_max_pool2d(x2, 2, output_size=4),
            "fractional_max_pool3d_backward_cuda": lambda: F.fractional_max_pool3d(x3, 2, output_size=4),
            "upsample_linear1d_backward_out_cuda": lambda: F.interpolate(x1, scale_factor=2, mode="linear"),
            "reflection_pad1d_backward_out_cuda": lambda: F.pad(x1, (2, 2), mode="reflect"),
            "reflection_pad3d_backward_out_cuda": lambda: F.pad(x3, (1,) * 6, mode="reflect"),
        }
        for caller, forward in cases.items():
            y = forward()
            with pytest.raises(RuntimeError, match="^" + caller + " does not have"):
                y.sum().backward()
        lp = torch.randn(20, 2, 6, device="cuda").log_softmax(2).requires_grad_()
        loss = F.ctc_loss(lp, torch.ones(2, 5, dtype=torch.long, device="cuda"), [20, 20], [5, 5])
        with pytest.raises(RuntimeError, match=r"^ctc_loss_backward_gpu does not have"):
            loss.backward()
        bag = torch.nn.EmbeddingBag(10, 4, mode="max").to("cuda")
        y = bag(torch.zeros(4, 3, dtype=torch.long, device="cuda"))
        with pytest.raises(RuntimeError, match=r"^embedding_bag_backward_cuda_max does not have"):
            y.sum().backward()
        bag = torch.nn.EmbeddingBag(10, 4, mode="mean").to("cuda")
        bag(torch.zeros(4, 3, dtype=torch.long, device="cuda")).sum().backward()
        i = torch.zeros(10, dtype=torch.long, device="cuda")
        with pytest.raises(RuntimeError, match=r"^_bincount_cuda does not have"):
            torch.bincount(i, weights=torch.ones(10, device="cuda"))
        assert torch.bincount(i, minlength=3).shape == (3,)
        for accumulate in (False, True):
            with pytest.raises(RuntimeError, match=r"^put_ does not have"):
                torch.zeros(10, device="cuda").put_(
                    i[:2], torch.ones(2, device="cuda"), accumulate=accumulate
                )


def test_kernels_that_do_not_alert(deterministic, monkeypatch):
    # torch 2.11: reflection_pad2d's backward has a deterministic kernel
    # (ReflectionPad.cu `reflection_pad2d_backward_det_out_kernel`); `torch.mode`'s meta function
    # alerts as median's (torch/_meta_registrations.py `meta_median_mode_dim`), its CUDA kernel
    # (TensorModeKernel.cpp) does not; median with indices does (Sorting.cpp)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    F = torch.nn.functional
    with vramscope.capture(gpu="h100"):
        x2 = torch.randn(2, 4, 8, 8, device="cuda", requires_grad=True)
        F.pad(x2, (2, 2, 2, 2), mode="reflect").sum().backward()
        v = torch.randn(4, 10, device="cuda")
        values, indices = torch.mode(v, 1)
        assert values.shape == indices.shape == (4,)
        with pytest.raises(RuntimeError, match=r"^median CUDA with indices output"):
            torch.median(v, 1)
        assert torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    with vramscope.capture(gpu="h100"):
        torch.mode(torch.randn(4, 10, device="cuda"), 1)
        assert torch.is_deterministic_algorithms_warn_only_enabled()


def test_index_add_takes_index_put_with_accumulate(deterministic, monkeypatch):
    # cuda/Indexing.cu `index_add_cuda_impl`: under deterministic algorithms, `index.to(kLong)`,
    # `source * alpha` and `result.index_put_(indices, ..., true)` (sort-based) in place of atomics
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    def peak_above(f):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        f()
        return torch.cuda.max_memory_allocated() - base

    with vramscope.capture(gpu="h100"):
        idx = torch.randint(0, 1000, (1 << 20,), device="cuda")
        src = torch.rand(1 << 20, 8, device="cuda")
        t = torch.zeros(1000, 8, device="cuda")
        explicit = peak_above(lambda: t.index_put_((idx,), src * 1, accumulate=True))
        det = peak_above(lambda: t.index_add_(0, idx, src))
        assert det == explicit > src.nbytes
        # an int32 index is made int64 first; the out-of-place op copies `self` in first
        idx32 = idx.int()
        det32 = peak_above(lambda: t.index_add_(0, idx32, src))
        assert det32 >= det + idx.nbytes
        out = peak_above(lambda: t.index_add(0, idx, src, alpha=2))
        assert out >= det + t.nbytes
        torch.use_deterministic_algorithms(False)
        assert peak_above(lambda: t.index_add_(0, idx, src)) == 0
        torch.use_deterministic_algorithms(True)


def test_float_cumsum_takes_the_deterministic_scan(deterministic, monkeypatch):
    # torch 2.11 ScanUtils.cuh `scan_dim`: a 1-d floating cumsum under deterministic algorithms runs
    # `inclusive_deterministic_scan` (ATen cuda/cub.cuh): no alert, and in place of CUB's storage one
    # buffer of min(#SMs, tiles) partial sums (tiles of 512 threads x 16 float32 items)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    def scratch(x):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        y = x.cumsum(0)
        assert y.shape == x.shape
        return torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()

    with vramscope.capture(gpu="h100"):
        x = torch.rand(10_000_000, device="cuda")
        assert scratch(x) == 1024  # 132 blocks x 4 bytes, one 512-byte-rounded block
        small = torch.rand(5000, device="cuda")
        assert scratch(small) == 512  # one block x 4 bytes
        torch.use_deterministic_algorithms(False)
        assert scratch(x) > 1024  # CUB's scan storage
        torch.use_deterministic_algorithms(True)
        # the values of a small scan are kept (a sampler's `searchsorted` over them)
        c = torch.tensor([0.25, 0.25, 0.5], device="cuda").cumsum(0)
        assert c[-1].item() == 1.0


def test_float_scatter_add_takes_index_put_with_accumulate(deterministic, monkeypatch):
    # TensorAdvancedIndexing.cpp `scatter_add` under deterministic algorithms on CUDA:
    # `_scatter_via_index_put` (pytorch#156744): the index alone where it is 1-d or broadcast over
    # the other dims, else it and an `arange` per other dim; integers keep atomics (pytorch#170274)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    def peak_above(f):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        f()
        return torch.cuda.max_memory_allocated() - base

    with vramscope.capture(gpu="h100"):
        idx = torch.randint(0, 256, (8, 1 << 18), device="cuda")
        src = torch.rand(8, 1 << 18, device="cuda")
        out = torch.zeros(8, 256, device="cuda")
        rows = torch.arange(8, device="cuda").view(8, 1).expand(idx.shape)
        explicit = peak_above(lambda: out.index_put_((rows, idx), src, accumulate=True))
        # and the rows' `arange` made inside (8 int64, one 512-byte block)
        assert peak_above(lambda: out.scatter_add_(1, idx, src)) == explicit + 512 > 512
        flat = torch.zeros(1000, device="cuda")
        i1, v1 = idx.flatten() % 1000, src.flatten()
        assert peak_above(lambda: flat.scatter_add_(0, i1, v1)) == peak_above(
            lambda: flat.index_put_((i1,), v1, accumulate=True)
        )
        # an index broadcast over the rows indexes alone
        shared = idx[:1].expand(8, -1)
        assert peak_above(lambda: out.scatter_add_(1, shared, src)) == peak_above(
            lambda: torch.ops.aten.index_put_.default(out, [None, idx[0]], src, True)
        )
        # integers: the atomic kernel, no scratch
        assert peak_above(lambda: out.long().scatter_add_(1, idx, src.long())) == peak_above(
            lambda: (out.long(), src.long())
        )
        # gather's backward scatters into its own zeros in place (GatherBackward0)
        x = src.clone().requires_grad_()
        g = peak_above(lambda: torch.autograd.grad(x.gather(1, idx[:, :4096]).sum(), x))
        assert g >= x.nbytes


def test_scatter_reduce_prod_and_index_reduce_alert(deterministic, monkeypatch):
    # ap64's probe on the H100: `scatter_reduce(..., "prod")` raised "scatter_reduce_cuda_prod_ does
    # not have a deterministic implementation" (ScatterGatherKernel.cu, atomicMul), "sum" and "amax"
    # ran; `index_reduce_(..., "prod")` raised "index_reduce_cuda" (Indexing.cu
    # `index_reduce_func_cuda_impl`, every reduction). Both are structured: the out-of-place output
    # is made and freed by the raise
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    with vramscope.capture(gpu="h100"):
        j = torch.tensor([0, 1, 1], device="cuda")
        src = torch.ones(3, device="cuda")
        base = torch.zeros(1 << 20, device="cuda")
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with pytest.raises(RuntimeError, match=r"^scatter_reduce_cuda_prod_ does not have"):
            base.scatter_reduce(0, j, src, "prod")
        assert torch.cuda.memory_allocated() == before
        assert torch.cuda.max_memory_allocated() == before + (4 << 20)
        for reduce in ("sum", "amax"):
            base.scatter_reduce(0, j, src, reduce)
        for reduce in ("prod", "mean", "amax"):
            with pytest.raises(RuntimeError, match=r"^index_reduce_cuda does not have"):
                torch.zeros(4, device="cuda").index_reduce_(0, j, src, reduce)


def test_a_backward_pass_s_alert_names_the_engine_s_call_as_the_gpu_replays_it():
    # the engine replays a worker thread's warnings on the calling thread (engine.cpp
    # GraphTask::warning_handler_): at torch/autograd/graph.py's run_backward call, also for a pass
    # that records a graph (the twin runs it on its device thread, `_device_thread`); it named
    # the twin's `_capture.py`
    import warnings

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with vramscope.capture(gpu="h100"):
            torch.use_deterministic_algorithms(True, warn_only=True)
            try:
                x = torch.randn(2, 3, 8, 8, device="cuda", requires_grad=True)
                torch.nn.functional.adaptive_avg_pool2d(x, 3).sum().backward()
                y = torch.nn.functional.adaptive_avg_pool2d(x, 3).sum()
                torch.autograd.grad(y, x, create_graph=True)
            finally:
                torch.use_deterministic_algorithms(False)
    places = [
        os.path.basename(r.filename) for r in rec if "adaptive_avg_pool2d_backward_cuda" in str(r.message)
    ]
    assert places == ["graph.py", "graph.py"]
