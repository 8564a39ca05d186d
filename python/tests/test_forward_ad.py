"""Forward-mode AD through the normalizations and the logsumexp family (`vramscope._forward_ad`):
FunctionsManual.cpp's jvp formulas take their in-place branch for CUDA tensors, where the twin's
tensors (a dispatch mode on, so subclass-like) took the out-of-place one. The figures are the live
tensors at each formula's peak, counted from its statements."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwad
import torch.nn.functional as F
import vramscope


def _dual(*shape):
    return fwad.make_dual(torch.randn(*shape, device="cuda"), torch.randn(*shape, device="cuda"))


def _measure(fn, *args, **kwargs):
    """(peak above the live bytes before, bytes kept) of `fn(*args, **kwargs)`, and its result."""
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*args, **kwargs)
    return torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base, out


def _assert_dual(y, shape):
    primal, tangent = fwad.unpack_dual(y)
    assert primal.shape == tangent.shape == shape and tangent.is_cuda


# (8, 16, 32, 32) fp32: 512 KiB a tensor, 16 channels' statistics in 512-byte blocks
BN = (8, 16, 32, 32)
BN_UNIT = 8 * 16 * 32 * 32 * 4


@pytest.mark.parametrize(
    ("training", "affine", "peak"),
    [
        # training: Y, result_t, (x - mean) and result_p, with save_mean and save_invstd (the
        # out-of-place branch held 6 tensors: blind293/kh01's layer norm had the same shape)
        (True, True, 4 * BN_UNIT + 2 * 512),
        # no affine: `_norm_jvp`'s result_t and temp beside Y, the statistics and invstd_t
        (True, False, 3 * BN_UNIT + 3 * 512),
        # evaluation: cuDNN's statistics are empty; `1 / sqrt(running_var + eps)` is live
        (False, True, 4 * BN_UNIT + 512),
    ],
)
def test_batch_norm_forward_ad_runs_batch_norm_jvp_in_place(training, affine, peak):
    with vramscope.capture(gpu="h100"), fwad.dual_level():
        x = _dual(*BN)
        w, b = (_dual(16), _dual(16)) if affine else (None, None)
        rm, rv = torch.zeros(16, device="cuda"), torch.ones(16, device="cuda")
        got, kept, y = _measure(F.batch_norm, x, rm, rv, w, b, training=training)
        assert (got, kept) == (peak, 2 * BN_UNIT)
        _assert_dual(y, BN)


def test_batch_norm_forward_ad_of_a_weight_and_bias_without_tangents():
    # their tangents reach `_affine_jvp` as zero tensors: its out-of-place branch for the weight
    # (`result_t * weight` and the copy `add_zerotensor` makes of it, beside Y, result_t and
    # result_p), the bias added in place over `at::zeros({})` (ZeroTensor's fallback); `_norm_jvp`
    # stays in place. The twin took the subclass-like branches throughout: 6 tensors at the peak
    with vramscope.capture(gpu="h100"), fwad.dual_level():
        x = _dual(*BN)
        w, b = torch.randn(16, device="cuda"), torch.randn(16, device="cuda")
        got, kept, y = _measure(F.batch_norm, x, None, None, w, b, training=True)
        assert (got, kept) == (5 * BN_UNIT + 2 * 512, 2 * BN_UNIT)
        _assert_dual(y, BN)


@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_forward_ad_computes_the_three_tangents_in_place(affine):
    # the peak is `group_norm_invstd_jvp` (rstd's tangent, computed after Y's and mean's): Y,
    # result_t and `_invstd_jvp`'s two temporaries, with mean, rstd and mean's tangent (8 x 4 floats)
    with vramscope.capture(gpu="h100"), fwad.dual_level():
        x = _dual(*BN)
        w, b = (_dual(16), _dual(16)) if affine else (None, None)
        got, kept, y = _measure(F.group_norm, x, 4, w, b)
        assert (got, kept) == (4 * BN_UNIT + 3 * 512, 2 * BN_UNIT)
        _assert_dual(y, BN)


@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm_forward_ad_runs_the_fused_kernels_formulas(weight):
    # raised before ("You must implement the jvp function"): the fused kernel's rule is a custom
    # Function. At the peak, rstd's own tangent (`rms_norm_rstd_jvp`): Y, result_t and
    # `input_t * input_p`, with rstd, rstd^3 and its negation (512 floats each)
    unit = 512 * 1024 * 4
    with vramscope.capture(gpu="h100"), fwad.dual_level():
        x = _dual(512, 1024)
        g = _dual(1024) if weight else None
        got, kept, y = _measure(F.rms_norm, x, (1024,), g)
        assert (got, kept) == (3 * unit + 3 * 2048, 2 * unit)
        _assert_dual(y, (512, 1024))


# (512, 1000) fp32 logits: 2,048,000 bytes a tensor, 2,048 a row statistic
LOGITS_UNIT = 512 * 1000 * 4


@pytest.mark.parametrize(
    ("fn", "peak", "kept"),
    [
        # the result, then `logsumexp_jvp`: amax, x - amax and its exp (the H100's 507,904 in
        # fixtures/run/probes/kh67_forward_ad_per_op_probe_h100.txt, where the twin made 524,288)
        (lambda x: F.log_softmax(x, dim=-1), 3 * LOGITS_UNIT + 2048, 2 * LOGITS_UNIT),
        (lambda x: torch.softmax(x, -1), 3 * LOGITS_UNIT + 2048, 2 * LOGITS_UNIT),
        (lambda x: torch.logsumexp(x, 1), 2 * LOGITS_UNIT + 2 * 2048, 2 * 2048),
    ],
)
def test_logsumexp_family_forward_ad_scales_the_exponentials_in_place(fn, peak, kept):
    with vramscope.capture(gpu="h100"), fwad.dual_level():
        x = _dual(512, 1000)
        assert _measure(fn, x)[:2] == (peak, kept)


def test_cross_entropy_forward_ad_takes_the_log_softmax_jvp_in_place():
    with vramscope.capture(gpu="h100"), fwad.dual_level():
        x = _dual(512, 1000)
        target = torch.randint(0, 1000, (512,), device="cuda")
        got, kept, loss = _measure(F.cross_entropy, x, target)
        assert got == 3 * LOGITS_UNIT + 2048 and kept == 1024
        assert fwad.unpack_dual(loss).tangent.shape == ()


@pytest.mark.parametrize("fn", [lambda d: torch.cumprod(d, 1), lambda d: torch.prod(d, 1)])
def test_cumprod_and_prod_of_a_dual_that_requires_grad_keep_their_forward_formulas(fn):
    # the twin's backward rules for these ops are custom autograd Functions without `jvp`: a dual
    # input that also requires grad raised "You must implement the jvp function" where CUDA's ops
    # have forward formulas (`cumprod_jvp`; prod's through `prod_backward`)
    with vramscope.capture(gpu="h100"):
        x = torch.rand(64, 32, device="cuda", requires_grad=True)
        with fwad.dual_level():
            y = fn(fwad.make_dual(x, torch.rand(64, 32, device="cuda")))
            assert fwad.unpack_dual(y).tangent is not None and y.requires_grad


def _jvp_graph_ops(device):
    """The call_function targets of `torch.func.linearize`'s traced JVP (its `trace_fn` under
    `make_fx`) of a block with a Linear on a non-contiguous 3-D input (matmul, then the bias), a
    LayerNorm and GELU, as a Counter."""
    import collections

    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU()).to(device)
    x = torch.randn(2, 16, 8, device=device).transpose(1, 2)
    params = {n: p.detach() for n, p in block.named_parameters()}
    primals = list(params.values())

    def trace_fn(tangents):
        with fwad.dual_level():
            duals = {n: fwad.make_dual(p, t) for (n, p), t in zip(params.items(), tangents, strict=True)}
            return fwad.unpack_dual(torch.func.functional_call(block, duals, (x,))).tangent

    graph = make_fx(trace_fn)([p.new_empty(()).expand_as(p) for p in primals])
    return collections.Counter(str(n.target) for n in graph.graph.nodes if n.op == "call_function")


def test_linearize_traces_the_out_of_place_formulas_the_gpu_traces():
    # under the program's make_fx every tensor is subclass-like on the GPU too (a dispatch mode is
    # on), so layer_norm_jvp takes its out-of-place branch and Linear.cpp adds a dual bias out of
    # place: the twin recorded `add_`/`mul_` there, and `split_const_subgraphs` then folded none of
    # what follows them (blind309/kx03's linearize kept 0.3 GB of constants where the H100 kept 5.4 GB)
    expected = _jvp_graph_ops("cpu")
    with vramscope.capture(gpu="h100"):
        got = _jvp_graph_ops("cuda")
    assert got == expected
    assert "aten.add_.Tensor" not in got and "aten.mul_.Tensor" not in got
