"""Layouts and scratch of kernels whose CUDA behaviour the Python meta kernels do not give: each
against PyTorch's own CPU kernels (the same TensorIterator code) or an H200's per-op truth
(fixtures/run/truth_blind37_h200.tar.xz, truth_blind39_h200.tar.xz)."""

from __future__ import annotations

import pytest
import torch
import vramscope
from conftest import counted, extra_allocations

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


@pytest.mark.parametrize("strides", STRIDES[::2])
@pytest.mark.parametrize("op", [lambda a: aten.leaky_relu(a, 0.1), aten.hardswish])
def test_untagged_iterator_activations_lay_out_as_the_cpu_kernels(strides, op):
    # `leaky_relu` and `hardswish` carry no pointwise tag, but a TensorIterator makes their result
    # (blind297/kl02's H100 history: InfoGAN's channels-last (128, 128, 1, 1) Q-head activation)
    shape = (8, 240, 1, 1)
    cpu = op(torch.empty_strided(shape, strides[0])).stride()
    with vramscope.capture(gpu="h100"):
        sim = op(torch.empty_strided(shape, strides[0], device="cuda")).stride()
    assert sim == cpu


@pytest.mark.parametrize("strides", STRIDES)
def test_leaky_relu_backward_keeps_an_nc11_gradient_contiguous(strides):
    # its structured meta function builds the binary iterator over `self_or_result`, then the
    # gradient (Activation.cpp); the fast setup keeps (N, C, 1, 1) contiguous
    shape = (8, 240, 1, 1)
    cpu = aten.leaky_relu_backward(*(torch.empty_strided(shape, s) for s in strides), 0.1, False).stride()
    with vramscope.capture(gpu="h100"):
        args = (torch.empty_strided(shape, s, device="cuda") for s in strides)
        sim = aten.leaky_relu_backward(*args, 0.1, False).stride()
    assert sim == cpu


@pytest.mark.parametrize("grad_channels_last", [False, True])
def test_leaky_relu_backward_takes_self_or_results_layout_first(grad_channels_last):
    def make(device):
        g = torch.ones(4, 16, 5, 5, device=device)
        x = torch.ones(4, 16, 5, 5, device=device)
        if grad_channels_last:
            return g.to(memory_format=torch.channels_last), x
        return g, x.to(memory_format=torch.channels_last)

    cpu = aten.leaky_relu_backward(*make("cpu"), 0.1, False).stride()
    with vramscope.capture(gpu="h100"):
        sim = aten.leaky_relu_backward(*make("cuda"), 0.1, False).stride()
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


def test_batch_norm_backward_in_its_fused_kernel_gives_a_contiguous_result():
    # Normalization.cu: an NCHW input takes the fused kernel, whose result is `empty_like(input,
    # LEGACY_CONTIGUOUS_MEMORY_FORMAT)` whatever the gradient's layout (blind69/bq01 on the H200)
    with vramscope.capture(gpu="h200"):
        x = torch.empty(256, 128, 14, 14, device="cuda", dtype=torch.bfloat16)
        g = torch.empty(256, 128, 14, 14, device="cuda", dtype=torch.bfloat16).to(
            memory_format=torch.channels_last
        )
        w = torch.ones(128, device="cuda")
        m = torch.zeros(128, device="cuda")
        gi = aten.native_batch_norm_backward(g, x, w, None, None, m, m, True, 1e-5, [True] * 3)[0]
        assert gi.is_contiguous()


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


def test_cudnn_backward_reads_the_format_of_the_input_it_was_passed():
    # blind68/bp02 (a channels-last UNet whose GroupNorm gives NCHW inputs) on the H200: the weight's
    # gradient makes the NCHW input channels-last first, so a channels-last gradient is not copied
    # (3 outputs, the input's copy, 2 workspaces); a bias gradient alone copies nothing
    cl = torch.channels_last

    def setup():
        g = torch.empty(32, 128, 64, 64, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
        x = torch.empty(32, 128, 64, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(128, 128, 3, 3, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
        return g, x, w

    def run(mask):
        return lambda g, x, w: aten.convolution_backward(
            g, x, w, [128], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask
        )

    extra, requested = _extra(run([True] * 3), setup)
    assert extra == 5 and requested == 209290270 - 33554432 - 294912 - 256

    def setup_bias():
        g = torch.empty(32, 64, 128, 128, device="cuda", dtype=torch.bfloat16)
        x = torch.empty(32, 64, 128, 128, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(64, 64, 3, 3, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=cl)
        return g, x, w

    def bias_only(g, x, w):
        return aten.convolution_backward(
            g, x, w, [64], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, False, True]
        )

    assert _extra(bias_only, setup_bias) == (2, 2688 - 128)


def test_a_dgrad_alone_copies_a_strided_input_only_in_one_d():
    # Convolution.cpp: `output_mask[1] ? input.contiguous(...) : input`, after a 1-D input's own
    # `contiguous()`. blind47/au06 (vmap's expanded dummy input, H200): the result and cuDNN's
    # 19,341,459-byte workspace; a 1-D strided input (blind21/u02) is still copied.
    def setup():
        g = torch.empty(256, 64, 14, 14, device="cuda")
        x = torch.empty(1, 1, 1, 1, device="cuda").expand(256, 32, 14, 14)
        return g, x, torch.empty(64, 32, 3, 3, device="cuda")

    def run(g, x, w):
        return aten.convolution_backward(
            g, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False]
        )

    assert _extra(run, setup) == (1, 19341459)

    def setup_1d():
        g = torch.empty(4, 64, 100, device="cuda")
        x = torch.empty(4, 100, 32, device="cuda").transpose(1, 2)
        return g, x, torch.empty(64, 32, 1, device="cuda")

    def run_1d(g, x, w):
        return aten.convolution_backward(g, x, w, None, [1], [0], [1], False, [0], 1, [True, False, False])

    assert _extra(run_1d, setup_1d)[1] >= 4 * 100 * 32


def test_one_value_convolution_parameters_stand_for_every_spatial_dimension():
    # Convolution.cpp `convolution_backward`: `expand_param_if_needed` of stride, padding, dilation
    # and output_padding; torch.nn.grad.conv2d_input / conv2d_weight pass output_padding `[0]`
    # (blind216/hh04's feedback alignment): the same problem, its measured workspace, no note
    def setup():
        g = torch.empty(256, 64, 14, 14, device="cuda")
        x = torch.empty(1, 1, 1, 1, device="cuda").expand(256, 32, 14, 14)
        return g, x, torch.empty(64, 32, 3, 3, device="cuda")

    def run(g, x, w, one=False):
        pair = [1] if one else [1, 1]
        zeros = [0] if one else [0, 0]
        return aten.convolution_backward(
            g, x, w, None, pair, pair, pair, False, zeros, 1, [True, False, False]
        )

    assert _extra(lambda g, x, w: run(g, x, w, one=True), setup) == _extra(run, setup) == (1, 19341459)
    with vramscope.capture(gpu="h200") as cap:
        g = torch.empty(256, 64, 14, 14, device="cuda")
        w = torch.empty(64, 32, 3, 3, device="cuda")
        torch.nn.grad.conv2d_input((256, 32, 14, 14), w, g, padding=1)
        torch.nn.grad.conv2d_weight(torch.empty(256, 32, 14, 14, device="cuda"), w.shape, g, padding=1)
    assert cap.report()["unmeasured"] == []


def test_cudnn_convolutions_check_the_input_type_against_the_weight_and_bias():
    # Convolution.cpp `check_input_same_type_as_parameters` in `_convolution`'s and
    # `convolution_backward`'s cuDNN cases (the gradient is not checked), before any allocation:
    # blind216/hh04's H200 run raised at torch.nn.grad.conv2d_weight of an fp32 input by a bf16
    # gradient (the weight placeholder is the gradient's `new_empty(1).expand`)
    msg = r"^Input type \(torch\.cuda\.FloatTensor\) and weight type \(CUDABFloat16Type\) should be the same$"
    with vramscope.capture(gpu="h200"):
        x = torch.empty(4, 8, 16, 16, device="cuda")
        w = torch.empty(16, 8, 3, 3, device="cuda", dtype=torch.bfloat16)
        g = torch.empty(4, 16, 16, 16, device="cuda", dtype=torch.bfloat16)
        before = torch.cuda.memory_allocated()
        with pytest.raises(RuntimeError, match=msg):
            torch.nn.grad.conv2d_weight(x, w.shape, g, padding=1)
        with pytest.raises(RuntimeError, match=msg):
            aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        half = r"^Input type \(torch\.cuda\.FloatTensor\) and bias type \(torch\.cuda\.HalfTensor\)"
        with pytest.raises(RuntimeError, match=half):
            aten.convolution(x, w.float(), w.new_empty(16, dtype=torch.half), [1], [1], [1], False, [0], 1)
        assert torch.cuda.memory_allocated() == before
        # conv2d_input: the input placeholder takes the gradient's dtype, the weight's: no error
        gi = torch.nn.grad.conv2d_input(x.shape, w, g, padding=1)
        assert gi.dtype == torch.bfloat16


def test_a_convolution_of_host_and_cuda_operands_raises_as_on_the_gpu():
    # `convolution` has no generated device check: cuDNN's `check_input_same_type_as_parameters`
    # raises for a CUDA input (processErrorMsg's legacy names), the native depthwise kernel's CUDA
    # wrapper for a depthwise one, MKLDNN's check for an fp32 host input of a CUDA weight; the twin
    # ran them on (a module left on the host fed CUDA images)
    f = torch.nn.functional
    with vramscope.capture(gpu="h200"):
        x = torch.empty(2, 3, 16, 16, device="cuda")
        w = torch.empty(4, 3, 3, 3)
        before = torch.cuda.memory_allocated()
        same = (
            r"^Input type \(torch\.cuda\.FloatTensor\) and weight type \(torch\.FloatTensor\) "
            "should be the same$"
        )
        with pytest.raises(RuntimeError, match=same):
            torch.nn.Conv2d(3, 4, 3)(x)
        with pytest.raises(RuntimeError, match=same):
            f.conv_transpose2d(x, torch.empty(3, 4, 3, 3))
        bias = r"^Input type \(torch\.cuda\.FloatTensor\) and bias type \(CPUBFloat16Type\) should"
        with pytest.raises(RuntimeError, match=bias):
            aten.convolution(x, w.cuda(), torch.empty(4, dtype=torch.bfloat16), [1], [0], [1], False, [0], 1)
        wrapper = (
            r"but got weight is on cpu, different from other tensors on cuda:0 \(when checking argument in "
            r"method wrapper_CUDA___conv_depthwise2d\)$"
        )
        with pytest.raises(RuntimeError, match=wrapper):
            f.conv2d(x, torch.empty(3, 1, 3, 3), groups=3)
        mkldnn = (
            r"^Input type \(torch\.FloatTensor\) and weight type \(torch\.cuda\.FloatTensor\) should be the "
            r"same or input should be a MKLDNN tensor and weight is a dense tensor$"
        )
        with pytest.raises(RuntimeError, match=mkldnn):
            f.conv2d(x.cpu(), w.cuda())
        with pytest.raises(
            RuntimeError, match=r"got weight is on cuda:0, .* in method wrapper_CUDA___slow_conv2d_forward\)$"
        ):
            f.conv2d(torch.empty(1, 3, 8, 8), w.cuda())
        assert torch.cuda.memory_allocated() == before
        assert f.conv2d(x, w.cuda()).shape == (2, 4, 14, 14)


def test_a_one_d_backward_reads_its_gradients_format_on_the_four_d_view_issue_31():
    # Convolution.cpp views a 1-D problem as (N, C, 1, L) (`view4d`) before cuDNN's
    # `grad_output.to(input.suggest_memory_format())`: blind16/p03's (16, 256, 399) gradient
    # strided (102144, 1, 256) suggests channels-last in that view and is copied whatever the mask.
    # The H200's per-op truth, beyond the results: the bias's gradient alone 3 allocations (the copy
    # and the sum's two), the input's 1, the weight's 2, all three 4
    def setup():
        g = torch.empty(16, 399, 256, device="cuda", dtype=torch.float16).transpose(1, 2)
        x = torch.empty(16, 256, 399, device="cuda", dtype=torch.float16)
        return g, x, torch.empty(256, 256, 1, device="cuda", dtype=torch.float16)

    def run(mask):
        return lambda g, x, w: aten.convolution_backward(g, x, w, [256], [1], [0], [1], False, [0], 1, mask)

    assert _extra(run([False, False, True]), setup) == (3, 16375816)
    assert _extra(run([True, False, False]), setup) == (1, 3268608)
    assert _extra(run([False, True, False]), setup) == (2, 7462912)
    assert _extra(run([True, True, True]), setup) == (4, 20570120)


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


def test_trilinear_runs_its_composite_as_the_gpu_does():
    # blind44/ar06's nn.Bilinear(832, 1664, 256) at batch 8192 on the H200, after its first call (which
    # also takes cuBLAS's workspace): the zeroed output, then two products per output feature (513
    # allocations, 13,975,420,928 bytes requested in all)
    def setup():
        torch.bmm(torch.empty(2, 4, 4, device="cuda"), torch.empty(2, 4, 4, device="cuda"))
        a = torch.empty(8192, 832, device="cuda")
        w = torch.empty(256, 832, 1664, device="cuda")
        b = torch.empty(8192, 1664, device="cuda")
        return a, w, b

    def run(a, w, b):
        return aten._trilinear(a, w, b, [1, 3], [0], [1, 2], [2, 3])

    assert _extra(run, setup) == (512, 13975420928 - 8388608)


def test_max_mode_embedding_bag_backward_copies_a_strided_gradient():
    # blind44/ar06 on the H200: a 2,097,152-byte copy of the (8192, 64) slice of the bags' gradient
    def setup():
        g = torch.empty(8192, 1664, device="cuda")[:, :64]
        idx = torch.zeros(32768, dtype=torch.long, device="cuda")
        offsets = torch.zeros(8192, dtype=torch.long, device="cuda")
        max_idx = torch.zeros(8192, 64, dtype=torch.long, device="cuda")
        return g, idx, offsets, max_idx

    def run(g, idx, offsets, max_idx):
        return aten._embedding_bag_backward(
            g, idx, offsets, offsets, offsets, max_idx, 200000, False, 2, False, None
        )

    assert _extra(run, setup) == (1, 2097152)


def test_sum_mode_embedding_bag_backward_copies_a_strided_gradient_before_sorting():
    # blind95/cq05 on the H200: an EmbeddingBag(47000, 64, mode="sum") with per-sample weights over
    # 8,192 bags of 28,650 ids, its gradient a (8192, 64) slice of the concatenation's: the
    # 2,097,152-byte copy, then embedding_dense_backward's sort and segment scratch (15 allocations,
    # 12,507,157 bytes beyond the 12,032,000-byte gradient)
    def setup():
        g = torch.empty(8192, 1677, device="cuda")[:, 717 : 717 + 64]
        idx = torch.zeros(28650, dtype=torch.long, device="cuda")
        offsets = torch.zeros(8193, dtype=torch.long, device="cuda")
        offset2bag = torch.zeros(28650, dtype=torch.long, device="cuda")
        max_idx = torch.zeros(0, dtype=torch.long, device="cuda")
        weights = torch.empty(28650, device="cuda")
        return g, idx, offsets, offset2bag, max_idx, weights

    def run(g, idx, offsets, offset2bag, max_idx, weights):
        return aten._embedding_bag_backward(
            g, idx, offsets, offset2bag, offsets, max_idx, 47000, False, 0, False, weights
        )

    assert _extra(run, setup) == (15, 12507157)


def test_unfold_backward_takes_its_iterators_index():
    # blind44/ar03's torch.stft frames on the H200: an int64 arange of the 33,792 positions
    def setup():
        return (torch.empty(16, 129, 1024, device="cuda"),)

    assert _extra(lambda g: aten.unfold_backward(g, [16, 33792], 1, 1024, 256), setup) == (1, 270336)


def test_unfold_backward_of_folds_that_do_not_overlap_copies_into_its_result():
    # blind121/dq02 on the H200: WaveGlow's `unfold(2, 8, 8)` of (12, 80, 16000) bf16 frames, its
    # gradient permuted: the zeroed result only (UnfoldBackward.cpp's step >= size copy)
    def setup():
        return (torch.empty(12, 2000, 80, 8, device="cuda", dtype=torch.bfloat16).permute(0, 2, 1, 3),)

    assert _extra(lambda g: aten.unfold_backward(g, [12, 80, 16000], 2, 8, 8), setup) == (0, 0)


def test_general_batch_norm_statistics_reduce_a_float_copy():
    # blind44/ar02 on the H200: a bf16 channels_last_3d input's statistics come from var_mean over
    # a float32 copy (169,869,312 bytes) with Welford accumulators (6,488,064 + 8 bytes)
    def setup():
        x = torch.empty(2, 24, 96, 96, 96, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(24, device="cuda")
        return x.to(memory_format=torch.channels_last_3d), w

    def run(x, w):
        return aten.native_batch_norm(x, w, w, w.clone(), w.clone(), True, 0.1, 1e-5)

    assert _extra(run, setup) == (3 + 2, 176357384 + 2 * 96)


def test_softmax_backward_copies_a_channels_last_products():
    # blind44/ar02 on the H200: `grad * output` follows the channels_last_3d gradient, then its
    # contiguous copy: two temporaries of the gradient's size
    def setup():
        g = torch.empty(2, 4, 96, 96, 96, device="cuda").to(memory_format=torch.channels_last_3d)
        return g, torch.empty(2, 4, 96, 96, 96, device="cuda")

    assert _extra(lambda g, o: aten._softmax_backward_data(g, o, 1, torch.float32), setup) == (2, 56623104)


def test_max_over_a_dimension_takes_the_reductions_buffer():
    # blind44/ar04's F.gumbel_softmax(hard=True) on the H200: max(1) of a (32, 1024, 32, 32) softmax
    def setup():
        return (torch.empty(32, 1024, 32, 32, device="cuda"),)

    assert _extra(lambda x: x.max(1, keepdim=True), setup) == (2, 603979776 + 1024)


def test_a_reduction_past_32_bit_indexing_into_a_narrower_output_takes_an_accumulation_buffer():
    # blind148/er06's H200 per-op truth: `argmax(-1)` of (64, 512, 50265) bfloat16 logits (3.3 GB,
    # split into 32-bit launches) allocates 524,288 bytes beside its int64 result: Reduce.cuh's
    # AccumulationBuffer of the (value, index) pair, 16 bytes for each of the 32,768 outputs
    def setup():
        return (torch.empty(64, 512, 50265, dtype=torch.bfloat16, device="cuda"),)

    assert _extra(lambda x: x.argmax(-1), setup) == (1, 524288)
    # a quarter of it fits 32-bit indexing: one launch, no buffer
    assert _extra(lambda x: x[:16].argmax(-1), setup) == (0, 0)


def test_dropout_out_of_training_is_its_input_under_inference_mode():
    # Dropout.cpp returns the input; torch/_decomp's decomposition would clone it
    with vramscope.capture(gpu="h200"), torch.inference_mode():
        x = torch.empty(32, 309, 1024, device="cuda", dtype=torch.float16)
        before = torch.cuda.memory_allocated()
        y = torch.nn.functional.dropout(x, 0.1, training=False)
        assert torch.cuda.memory_allocated() == before
        assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_a_one_channel_volume_in_channels_last_3d_takes_the_channels_last_convolution():
    # ConvUtils.h `cudnn_conv_suggest_memory_format` reads strides: blind44/ar02's first convolution
    from vramscope._kernels import _channels_last

    x = torch.empty(2, 1, 96, 96, 96, device="meta").to(memory_format=torch.channels_last_3d)
    w = torch.empty(24, 1, 3, 3, 3, device="meta").to(memory_format=torch.channels_last_3d)
    assert _channels_last(x, w)
    assert not _channels_last(
        torch.empty(2, 1, 96, 96, 96, device="meta"), torch.empty(24, 1, 3, 3, 3, device="meta")
    )


def test_a_batch_one_linear_with_a_bias_takes_cublaslt():
    # blind45/as04's first nn.Linear on the H200 (batch 1): gemm_and_bias allocates cuBLAS's handle
    # workspace, then cuBLASLt's 1 MiB one
    def setup():
        return (
            torch.empty(1, 1600, device="cuda"),
            torch.empty(5, 1600, device="cuda"),
            torch.empty(5, device="cuda"),
        )

    assert _extra(torch.nn.functional.linear, setup) == (2, 33554432 + 1048576)


@pytest.mark.parametrize("op", ["mm", "bmm", "half_mm"])
def test_preferred_blas_library_cublaslt_runs_every_gemm_on_the_cublaslt_workspace(op):
    # CUDABlas.cpp `gemm_internal`/`bgemm_internal`: with the preferred backend cuBLASLt a plain mm or
    # bmm (no bias) runs `bgemm_internal_cublaslt`, which takes cuBLASLt's 1 MiB workspace beside the
    # handle's 32 MiB; with cuBLAS (the default) only the handle's
    shapes = {
        "mm": ((64, 128), (128, 256)),
        "bmm": ((4, 64, 128), (4, 128, 256)),
        "half_mm": ((64, 128), (128, 256)),
    }
    dtype = torch.float16 if op == "half_mm" else torch.float32
    run = torch.bmm if op == "bmm" else torch.mm

    def setup():
        return tuple(torch.empty(s, device="cuda", dtype=dtype) for s in shapes[op])

    assert _extra(run, setup) == (1, 33554432)
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        assert _extra(run, setup) == (2, 33554432 + 1048576)
    finally:
        torch.backends.cuda.preferred_blas_library("cublas")
    assert _extra(run, setup) == (1, 33554432)


def test_preferred_cublaslt_runs_slow_conv2d_s_gemms_on_the_cublaslt_workspace():
    # cudnn disabled: cuda/ConvolutionMM2d.cu's gemm a sample is `at::cuda::blas::gemm`, which
    # `gemm_internal` (CUDABlas.cpp) sends to cuBLASLt under the preference: its 1 MiB workspace
    # beside the handle's 32 MiB and the (C x kH x kW, oH x oW) columns
    def setup():
        return torch.empty(2, 16, 32, 32, device="cuda"), torch.empty(32, 16, 3, 3, device="cuda")

    def conv(x, w):
        with torch.backends.cudnn.flags(enabled=False):
            return torch.nn.functional.conv2d(x, w, padding=1)

    columns = 16 * 9 * 32 * 32 * 4
    assert _extra(conv, setup) == (2, columns + 33554432)
    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        assert _extra(conv, setup) == (3, columns + 33554432 + 1048576)
    finally:
        torch.backends.cuda.preferred_blas_library("cublas")


@pytest.mark.parametrize(
    ("dtype", "lt"), [(torch.bfloat16, True), (torch.float16, True), (torch.float32, False)]
)
def test_preferred_cublaslt_takes_16_bit_gemv_as_a_gemm(dtype, lt):
    # CUDABlas.cpp: gemv<at::Half>/<at::BFloat16> call gemm<>, cuBLASLt's under the preference;
    # cublasSgemv takes the handle's workspace only
    def setup():
        return torch.empty(512, 256, device="cuda", dtype=dtype), torch.empty(256, device="cuda", dtype=dtype)

    torch.backends.cuda.preferred_blas_library("cublaslt")
    try:
        got = _extra(torch.mv, setup)
    finally:
        torch.backends.cuda.preferred_blas_library("cublas")
    assert got == ((2, 33554432 + 1048576) if lt else (1, 33554432))


def _fp8_operands():
    """A (64, 128) by (128, 256) float8 product's operands and tensorwise scales."""
    a = torch.empty(64, 128, device="cuda", dtype=torch.float8_e4m3fn)
    b = torch.empty(256, 128, device="cuda", dtype=torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    return a, b, one, one


def test_scaled_mm_takes_the_cublaslt_workspaces():
    # blind49/aw01's first FP8 product on the H200: the result, then the handle's 32 MiB and
    # cuBLASLt's 1 MiB
    def run(a, b, sa, sb):
        return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    assert _extra(run, _fp8_operands) == (2, 33554432 + 1048576)


def test_int_mm_takes_the_cublas_workspace_and_no_cublaslt_one():
    # blind81/cc05's H200 per-op truth: the first `torch._int_mm` requested its int32 result and the
    # handle's 32 MiB; `int8_gemm` passes cuBLASLt no workspace
    def setup():
        return torch.empty(64, 128, device="cuda", dtype=torch.int8), torch.empty(
            128, 256, device="cuda", dtype=torch.int8
        )

    assert _extra(torch._int_mm, setup) == (1, 33554432)


@pytest.mark.parametrize(("m", "k", "n"), [(16, 64, 32), (32, 60, 32), (32, 64, 36)])
def test_int_mm_refuses_what_its_cuda_kernel_refuses(m, k, n):
    # `_int_mm_out_cuda` (Blas.cpp): more than 16 rows, k and n multiples of 8; `_int_mm_cuda`
    # allocated the int32 result before, and the exception frees it
    with vramscope.capture(gpu="h200"):
        a = torch.empty(m, k, device="cuda", dtype=torch.int8)
        b = torch.empty(n, k, device="cuda", dtype=torch.int8).t()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with pytest.raises(RuntimeError, match="needs to be greater than"):
            torch._int_mm(a, b)
        assert torch.cuda.memory_allocated() == before
        assert torch.cuda.max_memory_allocated() == before + (m * n * 4 + 511) // 512 * 512


@pytest.mark.parametrize(
    ("shape", "dtype", "dim", "requested"),
    [
        ((8192, 1024), torch.float16, [0], 33554464),
        ((8192, 4096), torch.float16, [0], 69206144),
        ((1024, 4096), torch.float32, [0], 33554560),
        ((16384, 2048), torch.bfloat16, [], 1060),
        ((16, 8, 1024, 128), torch.bfloat16, [0, 2, 3], 1088),
    ],
)
def test_amax_takes_the_reductions_buffer_in_its_own_type(shape, dtype, dim, requested):
    # blind124's H200 per-op truth (dt03's SmoothQuant calibration `amax(0)`, dt01's and dt02's fp8
    # scales): `gpu_reduce_kernel<scalar_t, scalar_t>`'s global buffer and semaphores
    def setup():
        return (torch.empty(shape, dtype=dtype, device="cuda"),)

    assert _extra(lambda x: torch.amax(x, dim), setup) == (2, requested)


def test_weight_int8pack_mm_runs_its_float32_parts():
    # blind124/dt04's H200 per-op truth: `_weight_int8pack_mm_cuda` (cuda/int8mm.cu) converts x and
    # the scales to float32, computes a float32 result and returns its copy in x's dtype: 4
    # allocations, 65,536 + 128,000 + 512,000 bytes beyond the (4, 32000) bfloat16 result
    def setup():
        return (
            torch.empty(4, 4096, device="cuda", dtype=torch.bfloat16),
            torch.empty(32000, 4096, device="cuda", dtype=torch.int8),
            torch.empty(32000, device="cuda", dtype=torch.bfloat16),
        )

    assert _extra(torch._weight_int8pack_mm, setup) == (3, 65536 + 128000 + 512000)


def test_bicubic_backward_copies_a_strided_gradient_contiguous():
    # blind84/cf01's H200 per-op truth: `upsample_bicubic2d_backward` of DINOv2's position
    # embeddings (a (1, 384, 28, 28) gradient in NHWC strides) makes it contiguous, 1,204,224 bytes
    def run(g):
        return aten.upsample_bicubic2d_backward(g, [28, 28], [1, 384, 37, 37], False)

    nhwc = lambda: (torch.empty(1, 28, 28, 384, device="cuda").permute(0, 3, 1, 2),)  # noqa: E731
    plain = lambda: (torch.empty(1, 384, 28, 28, device="cuda"),)  # noqa: E731
    assert _extra(run, nhwc) == (1, 1204224)
    assert _extra(run, plain) == (0, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bilinear_backward_copies_as_its_host_code_chooses(dtype):
    # UpSampleBilinear2d.cu, one host path for every floating dtype: a channel slice of a `cat`
    # (blind16/p02's H200 per-op truth, float32) is copied contiguous; a channels-last gradient of
    # 4+ channels runs the NHWC kernel as it is; one of 2 channels runs the NCHW kernel, over a
    # zeroed contiguous stand-in for the channels-last result and a contiguous copy of the gradient
    size = torch.tensor([], dtype=dtype).element_size()

    def run(c):
        return lambda g: aten.upsample_bilinear2d_backward(g, [64, 64], [2, c, 32, 32], False, 2.0, 2.0)

    def cat_slice(c):
        return lambda: (torch.empty(2, 2 * c, 64, 64, device="cuda", dtype=dtype)[:, :c],)

    def channels_last(c):
        return lambda: (torch.empty(2, 64, 64, c, device="cuda", dtype=dtype).permute(0, 3, 1, 2),)

    assert _extra(run(8), cat_slice(8)) == (1, 2 * 8 * 64 * 64 * size)
    assert _extra(run(8), channels_last(8)) == (0, 0)
    assert _extra(run(2), channels_last(2)) == (2, 2 * 2 * 32 * 32 * size + 2 * 2 * 64 * 64 * size)


def test_antialiased_upsampling_copies_a_strided_input_or_gradient_contiguous():
    # blind109/de05's H200 per-op truth: SigLIP2 resizes its (1, 768, 16, 16) position embeddings,
    # a permuted view (strides (768, 1, 12288, 768), not channels-last: its batch stride), by
    # `_upsample_bilinear2d_aa`: `input_.contiguous()`, 786,432 bytes; the backward of a
    # (1, 768, 21, 12) gradient in the same strides: `grad_output_.contiguous()`, 774,144 bytes
    def strided(c, h, w):
        return lambda: (torch.empty(c * h * w, device="cuda").as_strided((1, c, h, w), (c, 1, w * c, c)),)

    def plain(c, h, w):
        return lambda: (torch.empty(1, c, h, w, device="cuda"),)

    def fwd(x):
        return aten._upsample_bilinear2d_aa(x, [16, 16], False)

    def bwd(g):
        return aten._upsample_bilinear2d_aa_backward(g, [21, 12], [1, 768, 16, 16], False)

    assert _extra(fwd, strided(768, 16, 16)) == (1, 786432)
    assert _extra(fwd, plain(768, 16, 16)) == (0, 0)
    assert _extra(bwd, strided(768, 21, 12)) == (1, 774144)
    assert _extra(bwd, plain(768, 21, 12)) == (0, 0)


def test_cufft_copies_an_input_its_batch_dimensions_cannot_collapse():
    # `_exec_fft`: batch dimensions in stride order, reshaped to one (blind50/ax04's H200 per-op
    # truth: an FFT over the middle dimensions copies its input once more); the sweep's rfft2 and
    # irfft2 over the last two dimensions take no copy but c2r's own clone
    x = lambda *s: lambda: (torch.empty(*s, device="cuda"),)  # noqa: E731
    z = lambda *s: lambda: (torch.empty(*s, device="cuda", dtype=torch.complex64),)  # noqa: E731
    r2c = lambda t: torch.fft.rfft2(t, dim=(1, 2))  # noqa: E731
    assert _extra(r2c, x(64, 14, 14, 384)) == (1, 19267584)
    assert _extra(lambda t: torch.fft.irfft2(t, s=(14, 14), dim=(1, 2)), z(64, 14, 8, 384)) == (
        2,
        2 * 22020096,
    )
    assert _extra(lambda t: torch.fft.fft2(t, dim=(1, 2)), z(64, 14, 14, 384)) == (1, 38535168)
    assert _extra(torch.fft.rfft2, x(16, 32, 64, 64)) == (0, 0)
    assert _extra(torch.fft.irfft2, z(16, 32, 64, 33)) == (1, 8650752)


def test_cufft_work_area_of_a_measured_plan():
    # blind113/di07's H200 per-op truth (FNO3d): rfftn and irfftn over (64, 64, 46) at batch 200
    # make cuFFT's work area, 753,664 bytes an item; the channels-last input also its copy, the
    # complex-to-real plan its input's clone; the complex-to-complex plan of those sizes none
    dims = (-3, -2, -1)
    x = lambda: (torch.empty(10, 20, 64, 64, 46, device="cuda"),)  # noqa: E731
    x_cl = lambda: (torch.empty(10, 64, 64, 46, 20, device="cuda").permute(0, 4, 1, 2, 3),)  # noqa: E731
    z = lambda *s: lambda: (torch.empty(*s, device="cuda", dtype=torch.complex64),)  # noqa: E731
    assert _extra(lambda t: torch.fft.rfftn(t, dim=dims), x) == (1, 150732800)
    assert _extra(lambda t: torch.fft.rfftn(t, dim=dims), x_cl) == (2, 2 * 150732800)
    irfftn = lambda t: torch.fft.irfftn(t, s=(64, 64, 46), dim=dims)  # noqa: E731
    assert _extra(irfftn, z(10, 20, 64, 64, 24)) == (2, 157286400 + 150732800)
    assert _extra(lambda t: torch.fft.fftn(t, dim=dims), z(10, 20, 64, 64, 46)) == (0, 0)


def test_cufft_work_area_of_long_one_dimensional_plans():
    # blind206/gx03's H200 per-op truth and history (HyenaDNA's fftconv over 2L): the 1-D plans of
    # 262,144 take one half-spectrum an item as their work area (the real-to-complex one after the
    # padded input and the result, the complex-to-real one after its input's clone), the
    # complex-to-complex plan of 65,536 one signal an item; the real plans of 65,536 none
    x = lambda *s: lambda: (torch.empty(*s, device="cuda"),)  # noqa: E731
    z = lambda *s: lambda: (torch.empty(*s, device="cuda", dtype=torch.complex64),)  # noqa: E731
    assert _extra(lambda t: torch.fft.rfft(t, n=262144), x(256, 131072)) == (2, 268435456 + 268437504)
    irfft = lambda t: torch.fft.irfft(t, n=262144, norm="forward")  # noqa: E731
    assert _extra(irfft, z(1, 256, 131073)) == (2, 2 * 268437504)
    assert _extra(torch.fft.fft, z(4, 256, 65536)) == (1, 536870912)
    assert _extra(torch.fft.rfft, x(1024, 65536)) == (0, 0)
    assert _extra(lambda t: torch.fft.irfft(t, n=65536), z(1024, 32769)) == (1, 268443648)


def test_upsampling_under_inference_mode_runs_the_cpp_composite():
    # `upsample_nearest2d.vec` calls `upsample_nearest2d` in UpSampleNearest2d.cpp: its output only
    # (torch/_decomp's decomposition makes index tensors; blind51/ay05's H200 history: one output)
    def run(x):
        with torch.inference_mode():
            return torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")

    assert _extra(run, lambda: (torch.empty(4, 8, 16, 16, device="cuda", dtype=torch.float16),)) == (0, 0)


def test_upsample_nearest3d_of_channels_last_3d_copies_both_ways():
    # UpSampleNearest3d.cu has no channels-last kernel: a contiguous `output_c` beside the
    # channels_last_3d output, and the input's contiguous copy, both freed at the return
    # (blind186/gd02's H200 record: bf16 (8, 256, 4, 16, 16) by (1, 2, 2), 3 allocations)
    def run(x):
        return torch.nn.functional.interpolate(x, scale_factor=(1.0, 2.0, 2.0), mode="nearest")

    def setup(fmt):
        x = torch.empty(8, 256, 4, 16, 16, device="cuda", dtype=torch.bfloat16)
        return (x.contiguous(memory_format=fmt),)

    assert _extra(run, lambda: setup(torch.channels_last_3d)) == (2, 16777216 + 4194304)
    assert _extra(run, lambda: setup(torch.contiguous_format)) == (0, 0)


def test_upsample_nearest2d_of_few_channels_last_takes_the_contiguous_path():
    # UpSampleNearest2d.cu runs its NHWC kernel for 4 channels or more only ("heuristic: only use
    # channels_last path when it's faster than the contiguous path"): below, a plain `output_c`
    # beside the structured kernel's channels-last output and the input's contiguous copy, both
    # freed at the return; the backward alike (`grad_input_c`, `grad_output.contiguous()`)
    def run(x):
        return torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")

    def setup(c, h=32):
        return lambda: (torch.empty(4, c, h, h, device="cuda").contiguous(memory_format=torch.channels_last),)

    def backward(c):
        return lambda g: aten.upsample_nearest2d_backward(g, [64, 64], [4, c, 32, 32])

    assert _extra(run, setup(3)) == (2, 4 * 3 * 64 * 64 * 4 + 4 * 3 * 32 * 32 * 4)
    assert _extra(run, setup(8)) == (0, 0)
    assert _extra(backward(3), setup(3, 64)) == (2, 4 * 3 * 32 * 32 * 4 + 4 * 3 * 64 * 64 * 4)
    assert _extra(backward(8), setup(8, 64)) == (0, 0)


def test_softmax_of_halves_to_float_is_one_kernel():
    # SoftMax.cpp: on CUDA `softmax(half, dtype=float32)` is `_softmax(x, dim, half_to_float=True)`
    # (blind45/as06's GPT-NeoX eager attention on the H200: no float copy of the scores)
    def setup():
        return (torch.empty(4, 16, 1024, 1024, device="cuda", dtype=torch.float16),)

    for fn in (torch.nn.functional.softmax, torch.nn.functional.log_softmax):
        assert _extra(lambda x, fn=fn: fn(x, dim=-1, dtype=torch.float32), setup) == (0, 0)


def test_softmax_under_fp16_autocast_reads_the_halves():
    # autocast's fp32_set_opt_dtype gives softmax and log_softmax dtype=float32, so SoftMax.cpp runs
    # `_softmax(x, dim, half_to_float=True)` on a half CUDA input: no float copy of it, and the backward
    # writes the half gradient itself (blind16/p03's H200 record: `_log_softmax_backward_data(...,
    # input_dtype=float16)`, its one float16 gradient and the float gradient's contiguous copy)
    def setup():
        return (torch.empty(16, 399, 128, device="cuda", dtype=torch.float16),)

    half, full = 16 * 399 * 128 * 2, 16 * 399 * 128 * 4
    # softmax's backward also makes `tmp = grad * output` (SoftMax.cu), a float temporary
    for fn, backward in ((torch.softmax, (2, half + full)), (torch.log_softmax, (1, half))):

        def run(x, fn=fn):
            with torch.autocast("cuda", dtype=torch.float16):
                return fn(x, -1)

        assert _extra(run, setup) == (0, 0)
        with vramscope.capture(gpu="h200"):
            x = setup()[0].requires_grad_()
            y = run(x)
            g = torch.empty_like(y)
            before = torch.cuda.memory_stats()
            (dx,) = torch.autograd.grad(y, x, g)
            after = torch.cuda.memory_stats()
            keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
            assert y.dtype == torch.float32 and dx.dtype == torch.float16
            assert tuple(after[k] - before[k] for k in keys) == backward


def test_indexing_by_a_cpu_index_copies_it_to_the_gpu_first():
    # make_info (TensorAdvancedIndexingUtils.h): `indice.to(self.device())` before the output;
    # blind57/be01's H200 history: MViT's rel_pos_h[dist_h.long()], a (28, 14) CPU index, 3,136 bytes
    with vramscope.capture(gpu="h200"):
        table = torch.empty(55, 96, device="cuda", dtype=torch.bfloat16)
        dist = torch.zeros(28, 14, dtype=torch.long)
        before = torch.cuda.memory_stats()
        out = table[dist]
        after = torch.cuda.memory_stats()
        counts = tuple(
            after[k] - before[k] for k in ("allocation.all.allocated", "requested_bytes.all.allocated")
        )
        assert counts == (2, 3136 + 28 * 14 * 96 * 2) and out.device.type == "cuda"
        assert torch.cuda.memory_allocated() - before["allocated_bytes.all.current"] == 75264


def test_assigning_through_cpu_indices_copies_them_to_the_gpu():
    # `_index_put_impl_`: a host scalar value copied first, then make_info's `indice.to(self.device())`
    # for each CPU index (blind61/bi06's H200 history: 4, 680 and 680 bytes, freed as the op returns)
    with vramscope.capture(gpu="h200"):
        t = torch.zeros(4, 85, 512, device="cuda")
        before = torch.cuda.memory_stats()
        t[:, torch.arange(85), torch.arange(427, 512)] = 1.0
        after = torch.cuda.memory_stats()
        counts = tuple(
            after[k] - before[k] for k in ("allocation.all.allocated", "requested_bytes.all.allocated")
        )
        assert counts == (3, 4 + 680 + 680)
        assert torch.cuda.memory_allocated() == before["allocated_bytes.all.current"]


def test_assigning_through_an_int32_device_index_widens_it_to_int64():
    # make_info (TensorAdvancedIndexing.cpp) converts an int32 index to int64 (`indice.to(kLong)`),
    # for index_put_ as for index; blind166/fj03's H200 per-op truth of gpt-fast's KV-cache write
    # `k_out[:, :, input_pos] = k_val` with an int32 (1,) input_pos: 1 allocation of 8 bytes
    with vramscope.capture(gpu="h200"):
        cache = torch.zeros(4, 4, 1072, 128, device="cuda", dtype=torch.bfloat16)
        pos = torch.tensor([1024], device="cuda", dtype=torch.int)
        k = torch.zeros(4, 4, 1, 128, device="cuda", dtype=torch.bfloat16)
        before = torch.cuda.memory_stats()
        cache[:, :, pos] = k
        after = torch.cuda.memory_stats()
        counts = tuple(
            after[k] - before[k] for k in ("allocation.all.allocated", "requested_bytes.all.allocated")
        )
        assert counts == (1, 8)
        assert torch.cuda.memory_allocated() == before["allocated_bytes.all.current"]


def test_assigning_through_device_indices_of_different_strides_copies_the_strided_ones():
    # AdvancedIndex (TensorAdvancedIndexing.cpp): two or more indices whose strides differ are each
    # made contiguous; blind120/dp01's H200 per-op truth of YOLOv5's `tobj[b, a, gj, gi] = iou`
    # (b, gj, gi strided columns of one (2337, 2) tensor, a contiguous): 3 allocations, 56,088 bytes
    with vramscope.capture(gpu="h200"):
        tobj = torch.zeros(32, 3, 80, 80, device="cuda", dtype=torch.float16)
        bc = torch.zeros(2337, 2, device="cuda", dtype=torch.long)
        a = torch.zeros(2337, device="cuda", dtype=torch.long)
        iou = torch.zeros(2337, device="cuda", dtype=torch.float16)
        b, gj = bc.T
        before = torch.cuda.memory_stats()
        tobj[b, a, gj, b] = iou
        mid = torch.cuda.memory_stats()
        # a range index is made a device tensor first (`sequenceToVariable`), then the strided
        # column is copied beside the host value's copy (the H200: 2 allocations, 18,698 bytes)
        t = torch.zeros(2337, 80, device="cuda", dtype=torch.float16)
        start = torch.cuda.memory_stats()
        t[range(2337), gj] = 1.0
        after = torch.cuda.memory_stats()
        keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
        assert tuple(mid[k] - before[k] for k in keys) == (3, 56088)
        assert tuple(after[k] - start[k] for k in keys) == (3, 18696 + 18698)
        assert torch.cuda.memory_allocated() == start["allocated_bytes.all.current"]


def test_a_cpu_index_beside_a_device_one_is_copied_at_its_own_shape_then_made_contiguous():
    # expandTensors (IndexingUtils.h) moves a CPU index to the GPU before the indices are broadcast;
    # then AdvancedIndex makes the moved (n, 1) index, strided (1, 0) at (n, k), contiguous beside
    # the contiguous device one: blind122/dr04's H200 per-op truth (Informer's ProbSparse sampling,
    # n = 3200, k = 2: 25,600 then 51,200 bytes, reading and assigning alike)
    with vramscope.capture(gpu="h200"):
        k = torch.empty(3200, 96, 64, device="cuda")
        rows = torch.arange(3200)[:, None]
        cols = torch.zeros(3200, 2, device="cuda", dtype=torch.long)
        v = torch.empty(3200, 2, 64, device="cuda")
        keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
        before = torch.cuda.memory_stats()
        out = k[rows, cols]
        mid = torch.cuda.memory_stats()
        k[rows, cols] = v
        after = torch.cuda.memory_stats()
        assert tuple(mid[key] - before[key] for key in keys) == (3, 25600 + 51200 + out.nbytes)
        assert tuple(after[key] - mid[key] for key in keys) == (2, 25600 + 51200)


def test_a_padding_mask_of_ones_reads_as_ones_at_any_size():
    # a factory of one value carries it past VALUE_LIMIT elements: transformers'
    # `create_bidirectional_mask` reads `mask.all()` of a (2, 182528) mask of ones and makes no mask
    # (blind122/dr05's H200 per-op truth); a write into it reaches the values of all its views
    # (its `copy_` makes them dense, `_DENSE_FILLS`): none keeps the one value it had
    with vramscope.capture(gpu="h200"):
        mask = torch.ones((2, 182528), device="cuda").to(dtype=torch.bool)
        assert bool(mask.all())
        assert float(torch.full((70000,), 7.0, device="cuda").max()) == 7.0
        m = torch.ones(200000, device="cuda", dtype=torch.long)
        view = m[:10]
        assert int(view.sum()) == 10
        m[5] = 3
        assert int(vramscope._tensor.value(m).sum()) == 200002
        assert vramscope._tensor.value(view).tolist() == [1, 1, 1, 1, 1, 3, 1, 1, 1, 1]
        assert int(view.sum()) == 12


def test_out_of_place_index_put_with_a_mask_runs_nonzero_after_its_copy():
    # `index_put` is `self.clone().index_put_(...)` (TensorAdvancedIndexing.cpp), as IndexPutBackward0
    # runs it; blind21/u02's H200 per-op truth: the copy, then the mask's nonzero as `x[mask] = v` has
    with vramscope.capture(gpu="h200"):
        t = torch.zeros(4, 199, 512, device="cuda")
        v = torch.zeros(512, device="cuda")
        mask = torch.zeros(4, 199, dtype=torch.bool)
        mask[:, :10] = True
        mask = mask.to("cuda")

        def counts(fn):
            before = torch.cuda.memory_stats()
            out = fn()
            after = torch.cuda.memory_stats()
            del out
            keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
            return tuple(after[k] - before[k] for k in keys)

        def assign():
            t[mask] = v

        in_place = counts(assign)
        out_of_place = counts(lambda: torch.ops.aten.index_put(t, [mask], v))
        assert in_place[0] >= 4
        assert out_of_place == (in_place[0] + 1, in_place[1] + t.numel() * 4)


def test_out_of_place_index_put_with_integer_indices_copies_its_host_value():
    # `_index_put_impl_` (TensorAdvancedIndexing.cpp): a one-element CPU value is moved to the device
    # (`value.to(self.device())`) before the kernel, for `index_put` (clone + index_put_) as for
    # `index_put_`; IndexPutBackward0 runs `grad.index_put(indices, zeros_like(values))`, so the
    # backward of `x[i, j] = -inf` copies its host scalar: blind195/gm06's H200 per-op truth
    # (Longformer's masked scores, indices the columns of an empty nonzero) 2 bytes in bf16, 4 in fp32
    def setup(dtype):
        def make():
            x = torch.zeros(4, 1, 12, 4096, dtype=dtype, device="cuda")
            rows = torch.zeros(0, 2, dtype=torch.long, device="cuda")
            return x, rows[:, 0], rows[:, 1], torch.zeros((), dtype=dtype)

        return make

    def put(x, i, j, v):
        return torch.ops.aten.index_put(x, [i, j], v)

    assert extra_allocations(setup(torch.bfloat16), put, gpu="h200") == (1, 2)
    assert extra_allocations(setup(torch.float32), put, gpu="h200") == (1, 4)


def test_index_put_accumulate_over_indexed_dims_apart_transposes_them_to_the_front():
    # `makeLinearIndex` (cuda/Indexing.cu): `x[i, :, j]` has no contiguous subspace of indexed dims,
    # so self is permuted to (8, 1, 12, 64) and sorted as an adjacent indexing; blind185/gc05's H200
    # per-op truth (LED's global attention backward): 16 allocations of 485 bytes beyond the copy
    def setup():
        x = torch.zeros(8, 12, 1, 64, dtype=torch.bfloat16, device="cuda")
        i = torch.arange(8, device="cuda")
        j = torch.zeros(8, dtype=torch.long, device="cuda")
        v = torch.ones(8, 12, 64, dtype=torch.bfloat16, device="cuda")
        return x, i, j, v

    def apart(x, i, j, v):
        return torch.ops.aten.index_put(x, [i, None, j], v, True)

    def adjacent(x, i, j, v):
        return torch.ops.aten.index_put(x.permute(0, 2, 1, 3), [i, j], v, True)

    assert extra_allocations(setup, apart, gpu="h200") == (16, 485)
    assert extra_allocations(setup, adjacent, gpu="h200") == (16, 485)


def test_a_copy_to_the_host_of_a_strided_tensor_reads_a_contiguous_device_copy():
    # copy_requires_temporaries (native/Copy.cpp): `src.expand_as(dst).contiguous()` on the device
    # unless both coalesce alike; blind16/p07's H200 per-op truth (save_on_cpu's `packed.copy_(t)`)
    with vramscope.capture(gpu="h200"):
        w = torch.empty(768, 3072, device="cuda", dtype=torch.bfloat16)

        def counts(fn):
            before = torch.cuda.memory_stats()
            fn()
            after = torch.cuda.memory_stats()
            keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
            return tuple(after[k] - before[k] for k in keys)

        host = torch.empty(3072, 768, dtype=torch.bfloat16)
        assert counts(lambda: host.copy_(w.t())) == (1, 4718592)
        assert counts(lambda: host.copy_(w.view(3072, 768))) == (0, 0)
        assert counts(lambda: w.t().cpu()) == (0, 0)  # preserve_format: the host copy keeps the strides
        assert counts(lambda: w.t().to("cpu", memory_format=torch.contiguous_format)) == (1, 4718592)
        assert counts(lambda: w.t().to("cpu", torch.float32)) == (1, 4718592)
        assert torch.cuda.memory_allocated() == w.numel() * 2


def test_a_copy_to_the_host_of_an_inference_tensor_stages_as_any_other():
    # inference mode skips `to`'s decomposition, so `Tensor.to` reaches the twin whole; on the GPU it
    # is `_to_copy` all the same, whose copy_impl reads a slice that is not dense through a contiguous
    # device copy (blind189/gg02's H200 history: the DDIM sampler's `x[:, :8].cpu()`, 20,480 bytes,
    # of an inference tensor returned from an `inference_mode` function)
    with vramscope.capture(gpu="h200"):
        with torch.inference_mode():
            x = torch.empty(64, 16, 10, device="cuda")
            _, inside = counted(lambda: x[:, :8].cpu())
            _, dense = counted(lambda: x.transpose(0, 1).to("cpu", torch.float16))
        _, outside = counted(lambda: x[:, :8].cpu())
    assert inside == outside == (1, 64 * 8 * 10 * 4)
    assert dense == (1, 64 * 16 * 10 * 4)


def test_accumulating_through_a_boolean_mask_sorts_the_masks_nonzero_columns():
    # expandTensors then index_put_with_sort_kernel (cuda/Indexing.cu); blind14/n02's H200 per-op
    # truth of `index_put(x, [mask], values, accumulate=True)`: 29 allocations, 164,978,029 bytes
    with vramscope.capture(gpu="h200"):
        x = torch.zeros(8192, 512, device="cuda")
        mask = torch.empty(8192, 512, dtype=torch.bool, device="cuda")
        values = torch.empty(1679355, device="cuda")
        before = torch.cuda.memory_stats()
        out = torch.ops.aten.index_put(x, [mask], values, True)
        after = torch.cuda.memory_stats()
        keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
        assert tuple(after[k] - before[k] for k in keys) == (29, 164978029)
        assert torch.cuda.memory_allocated() - before["allocated_bytes.all.current"] == out.numel() * 4


def test_accumulating_through_a_boolean_mask_frees_its_nonzero_before_the_sort():
    # `makeLinearIndex` (cuda/Indexing.cu) holds the expanded indices (the mask's `nonzero()`, an
    # (n, 2) int64 buffer here) in a local that dies as it returns the linear index, before the
    # sort's three buffers (blind183/ga05's H200 history of `x[mask]`'s backward)
    n = 1_000_000
    with vramscope.capture(gpu="h200"):
        x = torch.zeros(4096, 512, device="cuda")
        mask = torch.empty(4096, 512, dtype=torch.bool, device="cuda")
        values = torch.empty(n, device="cuda")
        torch.cuda.memory._record_memory_history()
        torch.ops.aten.index_put(x, [mask], values, True)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
    positions = next(e["addr"] for e in trace if e["action"] == "alloc" and e["size"] == 16 * n)
    freed = next(k for k, e in enumerate(trace) if e["action"] == "free_requested" and e["addr"] == positions)
    # per column: the wrapped index and its product by the stride; then the sort's three
    columns = [k for k, e in enumerate(trace) if e["action"] == "alloc" and e["size"] == 8 * n]
    assert len(columns) == 7 and columns[3] < freed < columns[4]


def test_accumulating_with_strided_index_columns_checks_their_contiguous_copies():
    # blind118/dn05's H200 per-op record of `grid.index_put_((scene, cell[:, 0], cell[:, 1]), ones,
    # accumulate=True)`: wrapIndexOnce's `max()` and `min()` reduce `self.contiguous()`
    # (ReduceAllOps.cpp), a copy of each strided column (38 allocations, 126,075,469 bytes); a
    # mask's nonzero columns are dense (cuda/Nonzero.cu returns the (dim, n) buffer transposed)
    with vramscope.capture(gpu="h200"):
        grid = torch.zeros(8, 201, 201, device="cuda")
        scene = torch.randint(0, 8, (1048576,), device="cuda")
        cell = torch.randint(0, 201, (1048576, 2), device="cuda")
        ones = torch.ones(1048576, device="cuda")
        before = torch.cuda.memory_stats()
        grid.index_put_((scene, cell[:, 0], cell[:, 1]), ones, accumulate=True)
        after = torch.cuda.memory_stats()
        keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
        assert tuple(after[k] - before[k] for k in keys) == (38, 126075469)
        assert torch.ones(8, 8, dtype=torch.bool, device="cuda").nonzero().stride() == (1, 64)


def test_dropout_in_place_keeps_its_noise_for_backward():
    # Dropout.cpp's `dropout_` never takes the fused kernel: a noise tensor like the input, multiplied
    # in place; MulBackward0 keeps it (blind57/be01's H200 history: 12,288 bytes, no bool mask)
    with vramscope.capture(gpu="h200"):
        w = torch.empty(4, 768, device="cuda", requires_grad=True)
        x = w * 2
        before = torch.cuda.memory_allocated()
        torch.nn.functional.dropout(x, 0.5, training=True, inplace=True)
        assert torch.cuda.memory_allocated() - before == 12288


def test_a_depthwise_3d_convolution_takes_the_native_kernel_without_a_workspace():
    # Convolution.cpp's `_select_conv_backend`: a contiguous 5-D depthwise problem is CudaDepthwise3d;
    # its backward allocates both results before the gradient's contiguous copy (blind57/be01)
    from vramscope._kernels import _native_depthwise_3d

    x = torch.empty(4, 96, 8, 56, 56, device="meta")
    w = torch.empty(96, 1, 3, 3, 3, device="meta")
    assert _native_depthwise_3d((x, w, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 96, False))
    assert not _native_depthwise_3d((x, w, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 96, True))
    w2 = torch.empty(96, 48, 3, 3, 3, device="meta")
    assert not _native_depthwise_3d((x, w2, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 2, False))
    with vramscope.capture(gpu="h200") as cap:
        conv = torch.nn.Conv3d(96, 96, 3, padding=1, groups=96, bias=False).cuda()
        y = conv(torch.empty(1, 96, 4, 9, 9, device="cuda", requires_grad=True))
        y.sum().backward()
    assert not [u for u in cap.report()["unmeasured"] if "cuDNN" in str(u)]


def test_a_depthwise_2d_convolution_takes_the_native_kernel_and_its_backward_order():
    # Convolution.cpp's `_select_conv_backend`: a float32 depthwise problem that suggests NCHW is
    # CudaDepthwise2d (no workspace, nothing named unmeasured); `conv_depthwise2d_backward_cuda`
    # (DepthwiseConv2d.cu) drops the input's contiguous copy after the weight's gradient, so the
    # input's gradient takes its block: the peak holds one copy of the input's size, not two
    from vramscope._kernels import _native_depthwise_2d

    x = torch.empty(8, 64, 32, 32, device="meta")
    w = torch.empty(64, 1, 3, 3, device="meta")
    args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 64)
    assert _native_depthwise_2d((x, w, *args, False))
    assert not _native_depthwise_2d((x, w, *args, True))  # channels-last: cuDNN
    assert not _native_depthwise_2d((x.half(), w.half(), *args, False))  # cuDNN's half heuristic
    assert _native_depthwise_2d(
        (x[:, :16].half(), w[:16].half(), [1, 1], [1, 1], [1, 1], False, [0, 0], 16, False)
    )
    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(8, 64, 32, 64, device="cuda")[..., :32]  # strided, suggests NCHW
        w = torch.empty(64, 1, 3, 3, device="cuda")
        g = torch.empty(8, 64, 32, 32, device="cuda")
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        mask = [True, True, True]
        grads = aten.convolution_backward(g, x, w, [64], *args, mask)
        # the input's gradient (2 MiB) in the copy's block, the weight's 2,560 and the bias's 512
        assert torch.cuda.max_memory_allocated() - before == 2097152 + 2560 + 512
        assert [t.shape for t in grads] == [x.shape, w.shape, (64,)]
        aten.convolution(x, w, None, *args)
    assert not cap.report()["unmeasured"]


def test_resize_past_the_storage_takes_a_new_block():
    # Resize.cpp's resize_bytes_cuda: a new block of the new size, the old freed after the copy
    with vramscope.capture(gpu="h200"):
        empty, one = torch.empty(0, device="cuda"), torch.ones(1, device="cuda")
        empty.resize_(64)
        assert torch.cuda.memory_allocated() == 1024
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        one.resize_(64)
        one.resize_(32)  # within its storage: nothing
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 1
        assert torch.cuda.memory_allocated() == 1024


def test_a_per_channel_qat_observer_allocates_as_the_h200_does():
    # FusedObsFakeQuant.cu on a (64, 3, 3, 3) weight, first call: the observer's buffers grown, the
    # per-channel min and max, the zero points' min and max, then the outputs; blind62/bj06's H200
    # per-op truth: 10 allocations, 10,184 bytes requested
    from torch.ao import quantization as tq

    with vramscope.capture(gpu="h200"):
        fq = tq.FusedMovingAvgObsFakeQuantize(
            observer=tq.MovingAveragePerChannelMinMaxObserver,
            quant_min=-128,
            quant_max=127,
            dtype=torch.qint8,
            qscheme=torch.per_channel_symmetric,
        ).cuda()
        w = torch.randn(64, 3, 3, 3, device="cuda")
        before = torch.cuda.memory_stats()
        fq(w)
        after = torch.cuda.memory_stats()
        counts = tuple(
            after[k] - before[k] for k in ("allocation.all.allocated", "requested_bytes.all.allocated")
        )
        assert counts == (10, 10184)


def test_qat_observers_reductions_and_copies_allocate_as_the_h200_does():
    # blind169/fm04's H200 per-op truth (eager QAT of DistilBERT): `aminmax(x)` of a (32, 256, 768)
    # float32 splits its reduction, a 4,224-byte global buffer and 4 bytes of semaphores beside the
    # two results (ReduceAMinMax.cu); the fused observer copies a non-contiguous activation
    # (`x.contiguous()`, 98,304 bytes for `hidden_state[:, 0]`); the unfused per-channel fake
    # quantization checks its int32 zero points by `aminmax` first (2 x 4 bytes, 11,796,488 in all)
    from torch.ao import quantization as tq

    def stats(fn):
        before = torch.cuda.memory_stats()
        out = fn()
        after = torch.cuda.memory_stats()
        keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
        return out, tuple(after[k] - before[k] for k in keys)

    with vramscope.capture(gpu="h200"):
        x = torch.empty(32, 256, 768, device="cuda")
        _, counts = stats(lambda: torch.aminmax(x))
        assert counts == (4, 4 + 4 + 4224 + 4)
        fq = tq.FusedMovingAvgObsFakeQuantize(
            observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=127
        ).cuda()
        h = torch.empty(32, 256, 768, device="cuda")[:, 0]
        _, counts = stats(lambda: fq(h))
        assert counts == (5, 98304 + 4 + 4 + 98304 + 24576)
        w = torch.empty(3072, 768, device="cuda")
        scale = torch.ones(3072, device="cuda")
        zp = torch.zeros(3072, dtype=torch.int32, device="cuda")
        _, counts = stats(lambda: torch.fake_quantize_per_channel_affine(w, scale, zp, 0, -128, 127))
        assert counts == (4, 4 + 4 + 9437184 + 2359296)  # the mask too, freed


def test_a_host_mask_assignment_copies_its_positions_to_the_gpu():
    # `prune.random_structured`'s `mask[:, channel_mask] = 1` with a CPU bool: no masked_fill_ (the
    # mask is on another device); the value's 4 bytes, then the host nonzero's 336 positions copied
    # to the GPU, 2,688 bytes (blind169/fm03's H200 per-op truth)
    with vramscope.capture(gpu="h200"):
        mask = torch.zeros(384, 384, device="cuda")
        keep = torch.zeros(384, dtype=torch.bool)
        keep[:336] = True
        before = torch.cuda.memory_stats()
        mask[:, keep] = 1
        after = torch.cuda.memory_stats()
        keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
        assert tuple(after[k] - before[k] for k in keys) == (2, 4 + 2688)


def test_squeeze_excitation_convolutions_take_each_problems_layout_issue_31():
    # blind56/bd05 on the H200 (EfficientNet-B0 in channels-last bf16): a pooled (192, 96, 1, 1) input
    # is contiguous and its (4, 96, 1, 1) weight channels-last, both contiguous in either layout. By
    # the strides (`suggest_memory_format`) the forward and the dgrad run channels-last, the wgrad
    # NCHW (its layout is the input's and the gradient's); the GPU's records: one workspace each.
    from vramscope._kernels import _channels_last

    def setup():
        x = torch.empty(192, 96, 1, 1, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(4, 96, 1, 1, device="cuda", dtype=torch.bfloat16)
        return x, w.to(memory_format=torch.channels_last)

    x = torch.empty(192, 96, 1, 1, device="meta")
    w = torch.empty(4, 96, 1, 1, device="meta").to(memory_format=torch.channels_last)
    assert w.is_contiguous() and _channels_last(x, w) and not _channels_last(x, x)

    def forward(x, w):
        return aten.convolution(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)

    assert _extra(forward, setup) == (1, 18688)

    def setup_backward():
        x, w = setup()
        return torch.empty(192, 4, 1, 1, device="cuda", dtype=torch.bfloat16), x, w

    def backward(g, x, w):
        args = ([4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, True])
        return aten.convolution_backward(g, x, w, *args)

    assert _extra(backward, setup_backward) == (1, 37120)
    with vramscope.capture(gpu="h200"):
        gi, gw, _ = backward(*setup_backward())
        # at::empty in each problem's layout, size-1 dimensions' strides included
        assert gi.stride() == (96, 1, 96, 96) and gw.stride() == (96, 1, 1, 1)


def test_mse_loss_backward_gives_a_contiguous_gradient():
    # Loss.cpp: `zeros_like(input, LEGACY_CONTIGUOUS_MEMORY_FORMAT)`, then the `_out` kernel
    # (blind68/bp02's H200 history: the loss gradient of a channels-last output is NCHW)
    with vramscope.capture(gpu="h200"):
        cl = torch.channels_last
        x = torch.empty(32, 3, 128, 128, device="cuda").contiguous(memory_format=cl)
        t = torch.empty(32, 3, 128, 128, device="cuda").contiguous(memory_format=cl)
        g = aten.mse_loss_backward(torch.ones((), device="cuda"), x, t, 1)
        assert g.is_contiguous() and g.shape == x.shape


@pytest.mark.parametrize("backward", [False, True])
def test_reflection_padding_copies_a_strided_operand_after_its_result(backward):
    # ReflectionPad.cu: `input_.contiguous()` / `grad_output_.contiguous()` once the result exists
    # (blind75/bw02 on the H200: 24,576,000 bytes more for EnCodec's (8, 64, 12000) padded slice)
    def setup():
        return torch.empty(8, 64, 12004, device="cuda")[:, :, :12000], torch.empty(
            8, 64, 11994, device="cuda"
        )

    def run(x, small):
        if backward:
            return aten.reflection_pad1d_backward(x, small, [3, 3])
        return aten.reflection_pad1d(x, [3, 3])

    assert _extra(run, setup) == (1, 24576000)


def test_reflection_padding_of_a_contiguous_input_takes_no_copy():
    def setup():
        return (torch.empty(8, 64, 12000, device="cuda"),)

    assert _extra(lambda x: aten.reflection_pad1d(x, [3, 3]), setup) == (0, 0)


def _double_backward_problems(weight_format, monkeypatch, input_format=torch.contiguous_format, of="x"):
    """The cuDNN problems (op, input's sizes and strides, weight's, channels-last) a conv's double
    backward hands `_conv_workspace` on the simulated H200, `memory_allocated()` after that backward
    and the copies the capture still holds for a node."""
    from vramscope import _capture, _kernels

    seen = []
    real = _kernels.conv._conv_workspace

    def spy(cap, op, conv):
        if torch._C._current_autograd_node() is not None:
            x, w = conv[0], conv[1]  # described, not held: their storages die as on the GPU
            seen.append((op, tuple(x.shape), x.stride(), tuple(w.shape), w.stride(), conv[-1]))
        return real(cap, op, conv)

    monkeypatch.setattr(_kernels.conv, "_conv_workspace", spy)
    with vramscope.capture(gpu="h200"):
        x = torch.empty(4, 3, 8, 8, device="cuda").contiguous(memory_format=input_format)
        w = torch.empty(8, 3, 3, 3, device="cuda").contiguous(memory_format=weight_format)
        x.requires_grad_()
        w.requires_grad_()
        y = torch.nn.functional.leaky_relu(torch.nn.functional.conv2d(x, w, padding=1), 0.2)
        (g,) = torch.autograd.grad(y.sum(), x if of == "x" else w, create_graph=True)
        seen.clear()
        g.pow(2).sum().backward()
        allocated = torch.cuda.memory_allocated()
        held = _capture.current().node_temps
    return seen, allocated, held


def test_conv_double_backward_makes_its_transposed_gradient_contiguous_issue_31(monkeypatch):
    # Convolution.cpp's `_convolution_double_backward`: `if (gOt.is_cuda()) gOt = gOt.contiguous()`
    # before gW = conv(ggIt, gOt); the twin's meta tensors are not `is_cuda()`. blind64/bl03's R1
    # penalty on the H200: that convolution's weight operand is contiguous, no copy in cuDNN's path
    seen, _, held = _double_backward_problems(torch.contiguous_format, monkeypatch)
    gw = [(xs, ws) for op, _, xs, w, ws, _ in seen if op == "forward" and w == (8, 4, 8, 8)]
    # gOt contiguous; ggIt = ggI.transpose(0, 1) passed as it is
    assert gw == [((64, 192, 8, 1), (256, 64, 8, 1))]
    assert held is None


def test_conv_double_backward_makes_a_channels_last_weight_contiguous_issue_31(monkeypatch):
    # the same body's `if (weight.is_cuda()) weight = weight.contiguous()` before ggO = conv(ggI,
    # weight): a channels-last weight is copied (ggI, a channels-last problem's dgrad, keeps that
    # problem channels-last), and the copy is dropped with the body (memory after the backward as
    # with a contiguous weight)
    seen, allocated, held = _double_backward_problems(torch.channels_last, monkeypatch)
    ggo = [(xs, ws, cl) for op, _, xs, w, ws, cl in seen if op == "forward" and w == (8, 3, 3, 3)]
    assert ggo == [((192, 1, 24, 3), (27, 9, 3, 1), True)]
    assert held is None
    assert allocated == _double_backward_problems(torch.contiguous_format, monkeypatch)[1]


def test_conv_double_backward_makes_its_gradient_contiguous_for_the_input_term_issue_31(monkeypatch):
    # and `if (gO.is_cuda()) gO = gO.contiguous()` before gI = convT(gO, ggW) where the weight's
    # gradient is differentiated (MAML's second order, blind45/as04): a channels-last gradient is
    # copied for that transposed call, dropped with the body
    seen, _, held = _double_backward_problems(
        torch.contiguous_format, monkeypatch, input_format=torch.channels_last, of="w"
    )
    gi = [(xs, ws) for op, x, xs, w, ws, _ in seen if op == "forward" and x == (4, 8, 8, 8)]
    assert gi == [((512, 64, 8, 1), (27, 9, 3, 1))]
    assert held is None


@pytest.mark.parametrize(
    "x, w, dilation, workspace, estimate",
    [
        # the table holds this Conv1d's forward at batch 128 only (16,515,088 bytes); at batch 127
        # it is unmeasured and takes 127/128 of them
        (
            (127, 128, 249),
            (128, 128, 3),
            1,
            16_386_064,
            "padding (0,), groups 1): estimated as 16386064 bytes from the measured input (128, 128, 249)",
        ),
        # no Conv1d of 127 input channels was measured: the nearest of the same kernel is 128
        # channels at batch 8 (8,339,472 bytes), scaled by the root of the channels' ratio
        (
            (8, 127, 995),
            (128, 127, 3),
            1,
            8_306_832,
            "padding (0,), groups 1): estimated as "
            "8306832 bytes from the measured input (8, 128, 995) by weight (128, 128, 3)",
        ),
        # none of this kernel with dilation 7 either: the nearest of its shape is the undilated
        # one at batch 8, scaled by length as its line grows towards batch 4 ((990 / 995)^0.966)
        (
            (8, 128, 990),
            (128, 128, 3),
            7,
            8_298_971,
            "padding (0,), dilation (7,), groups 1): "
            "estimated as 8298971 bytes from the measured input (8, 128, 995) with padding (0,) and "
            "dilation (1,)",
        ),
    ],
)
def test_an_unmeasured_convolution_takes_the_nearest_measured_workspace_issue_31(
    x, w, dilation, workspace, estimate
):
    # ops/conv.rs `cudnn_conv_nearest_workspace`: the nearest of the problem's kind, else of its
    # kernel, else of its kernel's shape; named as an estimate
    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(x, device="cuda")
        w = torch.empty(w, device="cuda")
        before = torch.cuda.memory_stats()["requested_bytes.all.current"]
        torch.cuda.reset_peak_memory_stats()
        y = torch.nn.functional.conv1d(x, w, dilation=dilation)
        peak = torch.cuda.memory_stats()["requested_bytes.all.peak"] - before
        assert peak == y.untyped_storage().nbytes() + workspace
        del y
    assert cap.report()["unmeasured"] == [
        f"cuDNN's forward workspace of input {tuple(x.shape)} by weight {tuple(w.shape)} (float32, "
        f"stride (1,), {estimate}"
    ]


def test_masked_select_backward_scatters_into_its_zeros_in_place():
    # blind100/cv01's H200 history (FastSpeech2-Conformer's masked L1 losses, 2,096 selected of
    # 2,096 values): `masked_select_backward` allocates the broadcast zeros (8,384 bytes), then
    # `masked_scatter_`'s int64 prefix sum (16,768) and CUB's scan storage (1,279), no clone
    n = 2096
    with vramscope.capture(gpu="h200"):
        x = torch.zeros(n, device="cuda", requires_grad=True)
        mask = torch.ones(n, dtype=torch.bool).cuda()
        y = torch.masked_select(x, mask)
        torch.cuda.memory._record_memory_history(max_entries=1000)
        before = len(torch.cuda.memory._snapshot()["device_traces"][0])
        y.sum().backward()
        trace = torch.cuda.memory._snapshot()["device_traces"][0][before:]
        torch.cuda.memory._record_memory_history(enabled=None)
        allocs = [e["size"] for e in trace if e["action"] == "alloc"]
        # (the loss's gradient first: 4-byte scalars)
        first = allocs.index(n * 4)
        assert allocs[first : first + 3] == [n * 4, n * 8, 1279] and x.grad.shape == (n,)


@pytest.mark.parametrize("op", [aten._log_softmax_backward_data, aten._softmax_backward_data])
def test_softmax_backwards_give_a_contiguous_gradient_as_the_structured_meta_function_does(op):
    # SoftMax.cpp's TORCH_META_FUNCs: set_output_raw_strided(0, grad.sizes(), {}, ...), as the CPU
    # kernel gives; blind21/u02's H200 history (histories_s22_h200.tar.xz): the CTC head's
    # log_softmax gradient of a transposed `ctc_loss` gradient, then lm_head's `mm` with no copy
    with vramscope.capture(gpu="h200"):
        out = torch.empty(4, 6, 32, device="cuda")
        grad = torch.empty(6, 4, 32, device="cuda").transpose(0, 1)
        gi = op(grad, out, -1, torch.float32)
        cpu = op(torch.randn(6, 4, 32).transpose(0, 1), torch.randn(4, 6, 32), -1, torch.float32)
        assert gi.stride() == cpu.stride() == (192, 32, 1)
        before = torch.cuda.memory_allocated()
        gi.view(-1, 32)
        assert torch.cuda.memory_allocated() == before


@pytest.mark.parametrize("op", [aten.huber_loss_backward, aten.smooth_l1_loss_backward])
@pytest.mark.parametrize("reduction", [0, 1])
def test_huber_and_smooth_l1_backwards_give_a_contiguous_gradient(op, reduction):
    # Loss.cpp: `at::zeros_like(input, MemoryFormat::Contiguous)` filled by the `_out` kernel, on CUDA
    # as on the CPU, whatever the input's strides; nothing else is allocated
    def call(t):
        x = t(6, 4, 32).transpose(0, 1)
        g = t(6, 4, 32).transpose(0, 1) if reduction == 0 else t(())
        return op(g, x, t(4, 6, 32), reduction, 1.0)

    cpu = call(torch.randn)
    with vramscope.capture(gpu="h200"):
        t = lambda *s: torch.empty(*s, device="cuda")  # noqa: E731
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        gi = call(t)
        after = torch.cuda.memory_stats()["allocation.all.allocated"]
        assert gi.stride() == cpu.stride() == (192, 32, 1)
        assert after - before == 4  # the three operands, then the gradient


# `std` in the H200 per-op records (blind113/di05, dd06, aa05, cr01, di06, ds01, dw02, dw05, dw06):
# shape, dtype, the call, and the allocations and requested bytes beyond the result
STD_RECORDS = [
    ((64, 4096), torch.float32, lambda x: aten.std.default(x), (2, 516)),
    ((64, 2048), torch.float32, lambda x: aten.std.default(x), (2, 260)),
    (
        (4, 1, 132300),
        torch.float32,
        lambda x: aten.std.correction(x, [-1], correction=1, keepdim=True),
        (2, 1104),
    ),
    ((1, 1, 211680), torch.float32, lambda x: aten.std.dim(x, [-1], True, True), (2, 420)),
    ((8192, 48), torch.float32, lambda x: aten.std.correction(x, [0], correction=1), (2, 786440)),
    ((64, 3, 32, 32), torch.float32, lambda x: aten.std.default(x), (2, 388)),
    ((262144,), torch.float32, lambda x: aten.std.default(x), (2, 516)),
    ((64, 4, 32, 32), torch.float32, lambda x: aten.std.default(x), (2, 516)),
    ((20000, 96), torch.float32, lambda x: aten.std.default(x), (2, 3764)),
    ((32, 3, 64, 64), torch.float64, lambda x: aten.std.default(x), (2, 1540)),
]


@pytest.mark.parametrize("shape,dtype,op,expected", STD_RECORDS)
def test_std_takes_welford_accumulators_in_its_global_buffer(shape, dtype, op, expected):
    def setup():
        return (torch.empty(shape, device="cuda", dtype=dtype),)

    assert _extra(op, setup) == expected


def test_log_sigmoid_forward_returns_an_empty_buffer_on_cuda():
    # blind150/et01's memory history on the H200: F.logsigmoid over 131,072 fp32 scores allocated
    # its 524,288-byte result alone (log_sigmoid_forward_cuda's buffer is at::empty({0}))
    with vramscope.capture(gpu="h200"):
        x = torch.empty(131072, device="cuda")
        before = torch.cuda.memory_allocated()
        out, buffer = aten.log_sigmoid_forward(x)
        assert out.shape == x.shape and buffer.shape == (0,)
        assert torch.cuda.memory_allocated() - before == 524288


def test_log_sigmoid_backward_values_over_the_empty_cuda_buffer():
    # blind271/jl03 (xLSTM's logsigmoid forget gates): the twin computed the backward's values by
    # the CPU kernel, which reads `buffer` (exp(-|x|), Activation.cpp's log_sigmoid_forward_cpu) and
    # broadcast the CUDA forward's empty one: a (.., 0) result and a resize warning the GPU never prints
    import warnings

    with vramscope.capture(gpu="h200"):
        x = torch.tensor([[-2.0], [0.5], [3.0]], device="cuda", requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.nn.functional.logsigmoid(x).sum().backward()
        assert x.grad.shape == (3, 1)
        expected = torch.sigmoid(-torch.tensor([[-2.0], [0.5], [3.0]]))
        assert torch.allclose(x.grad.cpu(), expected)


def test_a_channels_last_convolution_to_one_pixel_of_one_channel_runs_nchw():
    # cudnn_convolution_forward_out (ConvShared.cpp) copies the operands into the output's
    # suggest_memory_format(), and an (N, 1, 1, 1) output suggests NCHW: blind173/fq05's H200
    # per-op truth of a channels-last DCGAN's last conv, the weight's and the input's copies and
    # the NCHW problem's workspace (3 allocations, 65,536 + 33,554,432 + 33,824,784 bytes)
    def setup():
        x = torch.empty(512, 1024, 4, 4, device="cuda").to(memory_format=torch.channels_last)
        w = torch.empty(1, 1024, 4, 4, device="cuda").to(memory_format=torch.channels_last)
        return x, w

    def run(x, w):
        return aten.convolution(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)

    assert _extra(run, setup) == (3, 65_536 + 33_554_432 + 33_824_784)


def test_a_convolution_double_backward_sums_its_two_terms_out_of_place():
    # `_convolution_double_backward` (Convolution.cpp): `ggO = ggO + ggW_term` allocates, unlike the
    # engine's in-place accumulation into an input buffer; blind173/fq02's H200 history of
    # StyleGAN2's path-length penalty through a modulated ToRGB (grouped 1x1 conv, 4 x 4)
    import torch.nn.functional as F

    with vramscope.capture(gpu="h200"):
        x0 = torch.randn(16, 512, 4, 4, device="cuda", requires_grad=True)
        w0 = torch.randn(1, 3, 512, 1, 1, device="cuda", requires_grad=True)
        s = torch.randn(16, 1, 512, 1, 1, device="cuda", requires_grad=True)
        out = F.conv2d(x0.reshape(1, 16 * 512, 4, 4), (w0 * s).view(48, 512, 1, 1), groups=16)
        g1, g2 = torch.autograd.grad(out.sum(), (s, x0), create_graph=True)
        torch.cuda.memory._record_memory_history()
        (g1.pow(2).sum() + g2.pow(2).sum()).backward()
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
    events = [
        e["action"] for e in trace if e["size"] == 48 * 16 * 4 and e["action"] in ("alloc", "free_requested")
    ]
    # ggO = conv(ggI, w), ggW_term = conv(input, ggW), and their sum before either is freed
    assert events[:5] == ["alloc"] * 3 + ["free_requested"] * 2


@pytest.mark.parametrize("inplace", [True, False])
def test_index_copy_into_a_float8_tensor_has_no_cuda_kernel(inplace):
    # IndexKernel.cu's index_copy_kernel dispatches no float8 type: a float8 KV cache written by
    # `index_copy_` raises on the GPU; through a uint8 view it runs; `index_copy` made its result first
    with vramscope.capture(gpu="h200"):
        cache = torch.zeros(2, 4, 64, 128, device="cuda", dtype=torch.float8_e4m3fn)
        new = torch.zeros(2, 4, 1, 128, device="cuda", dtype=torch.float8_e4m3fn)
        pos = torch.tensor([3], device="cuda")
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with pytest.raises(NotImplementedError, match=r"index_copy_cuda.*Float8_e4m3fn"):
            if inplace:
                cache.index_copy_(2, pos, new)
            else:
                torch.index_copy(cache, 2, pos, new)
        assert torch.cuda.memory_allocated() == before
        assert torch.cuda.max_memory_allocated() == before + (0 if inplace else 65536)
        cache.view(torch.uint8).index_copy_(2, pos, new.view(torch.uint8))


@pytest.mark.parametrize("inplace", [True, False])
def test_index_copy_checks_dtypes_index_and_slices_as_its_meta_function(inplace):
    # TORCH_PRECOMPUTE_META_FUNC(index_copy): a bf16 cache written with fp32 keys (rotary tables in
    # fp32 promote them under autocast; blind305/kt02's draft) raises on the GPU; the meta tensors'
    # own path (torch/_refs, an index_put) checked nothing. `index_copy` made its result first
    with vramscope.capture(gpu="h100"):
        cache = torch.zeros(2, 4, 64, 128, device="cuda", dtype=torch.bfloat16)
        pos = torch.tensor([3], device="cuda")
        keys = torch.zeros(2, 4, 1, 128, device="cuda")
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        copy = (lambda *a: cache.index_copy_(*a)) if inplace else (lambda *a: torch.index_copy(cache, *a))
        with pytest.raises(RuntimeError, match=r"same dtype, but got \(self\) BFloat16 and \(source\) Float"):
            copy(2, pos, keys)
        assert torch.cuda.memory_allocated() == before
        assert torch.cuda.max_memory_allocated() == before + (0 if inplace else 131072)
        new = torch.zeros(2, 4, 1, 128, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(RuntimeError, match="Expected a long tensor for index, but got Int"):
            copy(2, pos.int(), new)
        with pytest.raises(RuntimeError, match="Destination slice shape: 2 4 128 at dimension 2"):
            copy(2, pos, new[:, :2])
        with pytest.raises(IndexError, match=r"Number of indices \(2\) should be equal"):
            copy(2, torch.tensor([3, 4], device="cuda"), new)
        cpu_index = torch.tensor([3])
        torch.cuda.reset_peak_memory_stats()
        with pytest.raises(RuntimeError, match=r"index is on cpu, .* method wrapper_CUDA_index_copy"):
            copy(2, cpu_index, new)  # the wrapper's check, before the result (the H100, kt68's probe)
        assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()
        copy(-2, pos, new)


def test_index_put_by_integer_indices_checks_the_value_dtype():
    # make_index_put_iterator: `x[:, i, i, :] = v` with a bf16 v into a float32 x raises on the GPU
    # (blind319/lh02's draft: a Sylvester flow's diagonals under autocast, R1 promoted to float32 by
    # a float32 mask); the meta kernel wrote it. A one-element host value through a device mask goes
    # to masked_fill_, which casts
    with vramscope.capture(gpu="h100"):
        r = torch.zeros(2, 4, 4, 3, device="cuda")
        idx = torch.arange(4, device="cuda")
        diag = torch.zeros(2, 4, 3, device="cuda", dtype=torch.bfloat16)
        before = torch.cuda.memory_allocated()
        with pytest.raises(RuntimeError, match="got Float for the destination and BFloat16 for the source"):
            r[:, idx, idx, :] = diag
        with pytest.raises(RuntimeError, match="got Float for the destination and Long for the source"):
            r[idx[:2]] = torch.tensor(3)  # a host 0-dim value is copied to the device first
        assert torch.cuda.memory_allocated() == before
        r[:, idx, idx, :] = diag.float()
        r[r > 0] = torch.tensor(2, dtype=torch.int64)


def test_scaled_mm_refuses_two_e5m2_operands_before_its_result():
    # Blas.cpp `_scaled_mm_out_cuda`: two float8_e5m2 operands stop before `resize_output`
    with vramscope.capture(gpu="h200"):
        a = torch.empty(32, 64, device="cuda", dtype=torch.float8_e5m2)
        b = torch.empty(32, 64, device="cuda", dtype=torch.float8_e5m2).t()
        one = torch.ones((), device="cuda")
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with pytest.raises(RuntimeError, match="two Float8_e5m2"):
            torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        assert torch.cuda.max_memory_allocated() == before


def test_scaled_mm_with_a_float8_result_takes_the_cublaslt_workspaces():
    # an fp8 output (`scale_result`) goes through the same cuBLASLt `scaled_gemm`; the twin raised
    # naming the call's dtype
    def setup():
        a = torch.empty(64, 128, device="cuda", dtype=torch.float8_e4m3fn)
        b = torch.empty(256, 128, device="cuda", dtype=torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        return a, b, one, one

    def run(a, b, sa, sb):
        return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, scale_result=sa, out_dtype=torch.float8_e4m3fn)

    assert _extra(run, setup) == (2, 33554432 + 1048576)


@pytest.mark.parametrize(("group", "tiles"), [(16, 8), (128, 3)])
def test_int4pack_refuses_what_int4mm_cu_refuses(group, tiles):
    # int4mm.cu: 2, 4 or 8 inner k-tiles in `_convert_weight_to_int4pack_cuda`, groups of 32 to 256
    # in `_weight_int4pack_mm_cuda`, both checked before their results
    with vramscope.capture(gpu="h200"):
        packed = torch.empty(64, 64, device="cuda", dtype=torch.uint8)
        x = torch.empty(8, 128, device="cuda", dtype=torch.bfloat16)
        sz = torch.empty(128 // group, 64, 2, device="cuda", dtype=torch.bfloat16)
        with pytest.raises(RuntimeError, match="refuses"):
            w = torch._convert_weight_to_int4pack(packed, tiles)
            torch._weight_int4pack_mm(x, w, group, sz)


def test_functional_scaled_mm_takes_the_cublaslt_workspaces():
    # `F.scaled_mm` runs `_scaled_mm_v2`, whose recipes end in `_scaled_gemm` as `_scaled_mm`'s do
    # (ScaledBlas.cpp); the twin gave it its result alone
    from torch.nn.functional import ScalingType

    def run(a, b, sa, sb):
        t = ScalingType.TensorWise
        return torch.nn.functional.scaled_mm(a, b, sa, t, sb, t, output_dtype=torch.bfloat16)

    assert _extra(run, _fp8_operands) == (2, 33554432 + 1048576)


def _fp8_grouped_operands():
    """Three groups of fp8 operands for the grouped GEMMs: a, b (column-major), rowwise scales, offsets."""
    a = torch.empty(512, 256, device="cuda", dtype=torch.float8_e4m3fn)
    b = torch.empty(3, 512, 256, device="cuda", dtype=torch.float8_e4m3fn).transpose(-2, -1)
    offs = torch.tensor([128, 256, 512], device="cuda", dtype=torch.int32)
    return a, b, torch.ones(512, device="cuda"), torch.ones(3, 512, device="cuda"), offs


def test_scaled_grouped_mm_allocates_its_arguments_and_a_workspace():
    # ScaledGroupMM.cu's sm_90 kernel: a buffer of 5 pointers per group (groups rounded up to 2)
    # and 36 bytes of strides and shape per group, then CUTLASS's workspace, 640 bytes x 132 SMs
    # (the H200's scratch sweep, session 60)
    def run(a, b, sa, sb, offs):
        return torch._scaled_grouped_mm(a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16)

    assert _extra(run, _fp8_grouped_operands) == (2, 4 * 5 * 8 + 3 * 36 + 640 * 132)


def test_functional_scaled_grouped_mm_runs_the_rowwise_grouped_kernel():
    # `F.scaled_grouped_mm` (2.10) calls `_scaled_grouped_mm_v2`, which has no meta kernel; its
    # rowwise recipe ends in `_f8_f8_bf16_rowwise_grouped_mm` as `_scaled_grouped_mm`'s does
    # (cuda/GroupedBlas.cpp): the twin raised NotImplementedError
    from torch.nn.functional import ScalingType

    def run(a, b, sa, sb, offs):
        r = ScalingType.RowWise
        out = torch.nn.functional.scaled_grouped_mm(a, b, sa, r, sb, r, offs=offs)
        assert out.shape == (512, 512) and out.dtype == torch.bfloat16
        return out

    assert _extra(run, _fp8_grouped_operands) == (2, 4 * 5 * 8 + 3 * 36 + 640 * 132)

    def run_3d(a, b, sa, sb, offs):
        r = ScalingType.RowWise
        a3 = a.view(2, 256, 256)
        return torch.nn.functional.scaled_grouped_mm(a3, b[:2], sa.view(2, 256), r, sb[:2], r)

    assert _extra(run_3d, _fp8_grouped_operands) == (2, 2 * 5 * 8 + 2 * 36 + 640 * 132)

    def bad(a, b, sa, sb, offs):
        r = ScalingType.RowWise
        return torch.nn.functional.scaled_grouped_mm(a, b.transpose(-2, -1), sa, r, sb, r, offs=offs)

    with vramscope.capture(gpu="h200"), pytest.raises(ValueError, match="mat2 to be transposed"):
        bad(*_fp8_grouped_operands())


def test_log_softmax_of_integer_tokens_has_no_cuda_kernel():
    # SoftMax.cu's host_softmax dispatches floating types and Half, BFloat16 only: cross_entropy of
    # token ids (TorchBench's cm3leon_generate train) stops at its log_softmax after the output, on
    # the GPU with NotImplementedError; the meta kernel runs on into nll_loss's AssertionError
    with vramscope.capture(gpu="h200"):
        tokens = torch.zeros(1, 128, device="cuda", dtype=torch.long)
        target = torch.zeros(1, 64, device="cuda", dtype=torch.long)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with pytest.raises(NotImplementedError, match=r"\"host_softmax\" not implemented for 'Long'"):
            torch.nn.functional.cross_entropy(tokens, target)
        assert torch.cuda.memory_allocated() == before
        assert torch.cuda.max_memory_allocated() == before + 1024
        with pytest.raises(NotImplementedError, match=r"'Int'"):
            torch.softmax(tokens.int().t(), 0)
        assert torch.nn.functional.log_softmax(tokens.float(), 1).shape == (1, 128)


def test_accumulating_through_a_host_mask_sorts_as_its_host_nonzero_index():
    # IndexBackward0 of `x[mask]` with a CPU mask (`unpad_sequence`'s `seq[idx < length]`,
    # blind325/ln05): `makeLinearIndex` (cuda/Indexing.cu) expands the mask by a host `nonzero()`,
    # so the sort kernel sees the host int64 index that `mask.nonzero()` gives
    mask = torch.zeros(1581, dtype=torch.bool)
    mask[:1200] = True

    def setup():
        return torch.zeros(1581, 1024, device="cuda"), torch.ones(1200, 1024, device="cuda")

    def put(index):
        def run(x, v):
            aten._index_put_impl_(x, [index], v, True, True)  # in place: no new storage

        return run

    by_mask = _extra(put(mask), setup)
    assert by_mask[0] > 0
    assert by_mask == _extra(put(mask.nonzero().squeeze(1)), setup)
