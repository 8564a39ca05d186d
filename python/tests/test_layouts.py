"""Layouts and scratch of kernels whose CUDA behaviour the Python meta kernels do not give: each
against PyTorch's own CPU kernels (the same TensorIterator code) or an H200's per-op truth
(fixtures/run/truth_blind37_h200.tar.xz, truth_blind39_h200.tar.xz)."""

from __future__ import annotations

import pytest
import torch
import vramscope
from conftest import extra_allocations

aten = torch.ops.aten


def _extra(op, setup):
    """Allocations and requested bytes `op()` makes beyond the storages it returns, on an H200."""
    return extra_allocations(setup, op, gpu="h200")


# (8, 240, 1, 1) tensors fit both layouts: TensorIterator's fast setup keeps them contiguous
STRIDES = [
    ((240, 1, 240, 240), (240, 1, 1, 1)),
    ((240, 1, 1, 1), (240, 1, 240, 240)),
    ((240, 1, 240, 240),) * 2,
]


@pytest.mark.parametrize("strides", STRIDES)
@pytest.mark.parametrize(
    "op", [aten.mul.Tensor, aten.add.Tensor, lambda a, b: aten.threshold_backward(a, b, 0)]
)
def test_pointwise_results_are_laid_out_as_the_cpu_kernels_lay_them_out(strides, op):
    shape = (8, 240, 1, 1)
    cpu = op(*(torch.empty_strided(shape, s) for s in strides)).stride()
    with vramscope.capture(gpu="h200"):
        sim = op(*(torch.empty_strided(shape, s, device="cuda") for s in strides)).stride()
    assert sim == cpu


@pytest.mark.parametrize("name", ["hardswish_backward", "hardsigmoid_backward", "hardtanh_backward"])
@pytest.mark.parametrize("grad_channels_last", [False, True])
def test_activation_backwards_take_the_gradients_layout_first(name, grad_channels_last):
    op = getattr(aten, name)
    extra = (-1.0, 1.0) if name == "hardtanh_backward" else ()

    def make(device):
        g = torch.ones(4, 16, 5, 5, device=device)
        x = torch.ones(4, 16, 5, 5, device=device)
        if grad_channels_last:
            return g.to(memory_format=torch.channels_last), x
        return g, x.to(memory_format=torch.channels_last)

    cpu = op(*make("cpu"), *extra).stride()
    with vramscope.capture(gpu="h200"):
        sim = op(*make("cuda"), *extra).stride()
    assert sim == cpu


def test_batch_norm_backward_outside_its_fused_kernel_keeps_the_inputs_format():
    # Normalization.cu: a channels-last input with an NCHW gradient takes the general kernel, whose
    # result is `at::empty` in the input's suggested format
    with vramscope.capture(gpu="h200"):
        x = torch.empty(8, 960, 20, 20, device="cuda", dtype=torch.bfloat16).to(
            memory_format=torch.channels_last
        )
        g = torch.empty(8, 960, 20, 20, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(960, device="cuda")
        m = torch.zeros(960, device="cuda")
        gi = aten.native_batch_norm_backward(g, x, w, None, None, m, m, True, 1e-5, [True] * 3)[0]
        assert gi.is_contiguous(memory_format=torch.channels_last) and not gi.is_contiguous()


def test_cudnn_backward_copies_a_gradient_whose_suggested_format_is_not_the_inputs():
    # blind37/ak02's squeeze-excitation convolution on the H200: 3 outputs and one 3,840-byte copy
    def setup():
        g = torch.empty_strided((8, 240, 1, 1), (240, 1, 1, 1), device="cuda", dtype=torch.bfloat16)
        x = torch.empty_strided((8, 960, 1, 1), (960, 1, 960, 960), device="cuda", dtype=torch.bfloat16)
        w = torch.empty_strided((240, 960, 1, 1), (960, 1, 960, 960), device="cuda", dtype=torch.bfloat16)
        return g, x, w

    def run(g, x, w):
        return aten.convolution_backward(g, x, w, [240], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True] * 3)

    assert _extra(run, setup) == (1, 3840)


def test_finite_checks_of_values_the_twin_lacks_take_them_as_finite():
    with vramscope.capture(gpu="h200"):
        h = torch.empty(4, 512, 768, device="cuda", dtype=torch.float16)
        assert bool(torch.isfinite(h).all())
        assert not bool(torch.isinf(h).any()) and not bool(h.isnan().any())


def test_masked_scatter_takes_the_measured_scratch():
    # blind39/am01 (LLaVA's image-token merge) on the H200: the prefix sum, the broadcast mask made
    # contiguous and CUB's scan beside the cloned output
    def setup():
        x = torch.empty(4, 512, 2048, device="cuda", dtype=torch.bfloat16)
        mask = torch.ones(4, 512, 1, device="cuda", dtype=torch.bool)
        src = torch.empty(1024, 2048, device="cuda", dtype=torch.bfloat16)
        return x, mask, src

    assert _extra(aten.masked_scatter, setup) == (3, 37824767)
