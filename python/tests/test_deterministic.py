"""`torch.use_deterministic_algorithms(True)` on the simulated GPU: the CUDA kernels that alert
(`Context::alertNotDeterministic`, `alertCuBLASConfigNotDeterministic`) raise as on the GPU."""

from __future__ import annotations

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
    # AdaptiveAveragePooling.cu, NLLLoss2d.cu (a reduced loss), ScanKernels.cpp (floating cumsum)
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
        with pytest.raises(RuntimeError, match=r"^cumsum_cuda_kernel"):
            torch.rand(100, device="cuda").cumsum(0)
        assert torch.arange(100, device="cuda").cumsum(0).shape == (100,)
        # interpolate's bilinear mode takes its decomposition under deterministic algorithms
        # (torch/nn/functional.py), whose backward is index_put with accumulate: no alert
        torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear").sum().backward()
        # a 1 x 1 adaptive average is a mean (AdaptiveAveragePooling.cpp)
        torch.nn.functional.adaptive_avg_pool2d(x, 1).sum().backward()
