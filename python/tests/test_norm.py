"""Normalization kernels' scratch (`vramscope._norm`) against what an sm_90 GPU's allocator counted
for the same ops (fixtures/run/truth_h200.tar.xz: allocations and requested bytes beyond the outputs)."""

from __future__ import annotations

import json
import lzma

import pytest
import torch
import vramscope
from conftest import FIXTURES, counted, extra_allocations
from vramscope import _norm


def _extra(setup, op):
    return extra_allocations(setup, op)


@pytest.mark.parametrize(
    ("shape", "staging"),
    # batch norm forward of a channels-last bf16 input: staging + semaphores, as measured
    [((48, 1152, 7, 7), 184464), ((48, 32, 112, 112), 65540), ((48, 24, 56, 56), 49160)],
)
def test_channels_last_batch_norm_statistics_take_the_measured_staging(shape, staging):
    def setup():
        x = torch.empty(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.ones(shape[1], device="cuda")
        return x, w, torch.zeros_like(w)

    def run(x, w, b):
        return torch.ops.aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)

    assert _extra(setup, run) == (2, staging)


def test_small_reductions_take_no_grid_rows():
    # BatchNorm1d on (N, C): the channels-last kernels, one grid row: no staging
    assert _norm.flexible_launch_configs(256, 512, coop=True)[1] == 1


def test_channels_last_batch_norm_backward_takes_sums_and_staging():
    def setup():
        shape = (48, 32, 112, 112)
        x = torch.empty(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        return torch.empty_like(x), x, torch.ones(32, device="cuda"), torch.zeros(32, device="cuda")

    def run(g, x, w, m):
        return torch.ops.aten.native_batch_norm_backward(g, x, w, None, None, m, m, True, 1e-5, [True] * 3)

    assert _extra(setup, run) == (4, 33028)


def test_batch_norm_backward_in_evaluation_recomputes_invstd():
    # blind50/ax01's H200 memory history (fixtures/run/placement): the input's gradient of an
    # eval-mode BatchNorm2d (cuDNN's inference forward saved no statistics) takes 2,048 bytes for 512
    # channels beside it, `batch_norm_backward_cuda`'s invstd from the running variance
    def setup():
        x = torch.empty(128, 512, 8, 8, device="cuda")
        return torch.empty_like(x), x, torch.ones(512, device="cuda"), torch.zeros(512, device="cuda")

    def run(g, x, w, m):
        none = m.new_empty(0)
        return torch.ops.aten.native_batch_norm_backward(
            g, x, w, m, m, none, none, False, 1e-5, [True, False, False]
        )

    assert _extra(setup, run) == (1, 2048)


def test_group_norm_scratch_is_the_measured_one():
    def setup():
        x = torch.empty(8, 64, 128, 128, device="cuda")
        return x, torch.ones(64, device="cuda"), torch.zeros(8, 8, device="cuda")

    def fwd(x, w, _m):
        return torch.ops.aten.native_group_norm(x, w, w, 8, 64, 128 * 128, 8, 1e-5)

    def bwd(x, w, m):
        return torch.ops.aten.native_group_norm_backward(x, x, m, m, w, 8, 64, 128 * 128, 8, [True] * 3)

    assert _extra(setup, fwd) == (2, 4096)
    assert _extra(setup, bwd) == (5, 6656)


def test_group_norm_backward_frees_its_scratch_in_reverse_declaration_order():
    # blind188/gf06's H200 history (SegResNet's GroupNorm(8, 32) at 4 x 32 x 128^3 under fp16
    # autocast): after dX, dgamma and dbeta, the kernel's ds, db (N, C), c2, c3 (N, G) and c1 (N, C)
    # are freed c3, c2, c1, then db, ds, as C++ destroys group_norm_kernel.cu's locals
    n, c, g = 4, 32, 8
    with vramscope.capture(gpu="h200"):
        x = torch.empty(n, c, 16, 16, 16, device="cuda")
        w = torch.ones(c, device="cuda")
        m = torch.zeros(n, g, device="cuda")
        torch.cuda.memory._record_memory_history()
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        out = torch.ops.aten.native_group_norm_backward(x, x, m, m, w, n, c, 16**3, g, [True] * 3)
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
        del out
    addr = {e["addr"]: i for i, e in enumerate(e for e in trace if e["action"] == "alloc")}
    freed = [addr[e["addr"]] for e in trace if e["action"] == "free_requested"]
    # allocations: dX, dgamma, dbeta, ds, db, c2, c3, c1; the scratch freed c3, c2, c1, db, ds
    assert freed == [6, 5, 7, 4, 3]


def test_group_norm_of_one_pixel_takes_the_1d_kernels():
    # group_norm_kernel.cu: H*W == 1 runs `GroupNorm1dForward` (no scratch) and, in the backward,
    # ds and db (N, C) before `GroupNorm1dBackward`'s c2 and c3 (N, G), float32 accumulators
    def setup():
        x = torch.empty(32, 96, 1, 1, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(96, device="cuda", dtype=torch.bfloat16)
        return x, w, torch.zeros(32, 8, device="cuda", dtype=torch.bfloat16)

    def fwd(x, w, _m):
        return torch.ops.aten.native_group_norm(x, w, w, 32, 96, 1, 8, 1e-5)

    def bwd(mask):
        return lambda x, w, m: torch.ops.aten.native_group_norm_backward(x, x, m, m, w, 32, 96, 1, 8, mask)

    assert _extra(setup, fwd) == (0, 0)
    assert _extra(setup, bwd([True] * 3)) == (4, 2 * 32 * 96 * 4 + 2 * 32 * 8 * 4)
    assert _extra(setup, bwd([False, True, True])) == (2, 2 * 32 * 96 * 4)  # no dX: no c2, c3


def test_layer_norm_copies_a_permuted_input_and_returns_a_contiguous_output():
    def setup():
        return torch.empty(64, 40, 56, 56, device="cuda").permute(0, 2, 3, 1), torch.ones(40, device="cuda")

    def run(x, w):
        out = torch.ops.aten.native_layer_norm(x, [40], w, w, 1e-6)
        assert out[0].is_contiguous()
        return out

    assert _extra(setup, run) == (1, 32112640)


def test_rms_norm_takes_the_fused_kernel():
    # `_fused_rms_norm` on an sm_90 GPU: Y and a (rows, 1) fp32 rstd, nothing else (ops truth of
    # blind2/b11: rms_norm of (32, 1, 2048) bf16 allocated 131072 + 128 bytes)
    with vramscope.capture():
        x = torch.empty(32, 1, 2048, device="cuda", dtype=torch.bfloat16)
        w = torch.ones(2048, device="cuda", dtype=torch.bfloat16)
        before = torch.cuda.memory_stats()
        with torch.inference_mode():
            y = torch.nn.functional.rms_norm(x, [2048], w)
        after = torch.cuda.memory_stats()
        assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 2
        assert (
            after["requested_bytes.all.allocated"] - before["requested_bytes.all.allocated"] == 131072 + 128
        )
        assert y.shape == x.shape


def test_rms_norm_backward_saves_input_and_rstd_only():
    with vramscope.capture():
        m = torch.nn.RMSNorm(768).cuda()
        x = torch.empty(8, 1024, 768, device="cuda", requires_grad=True)
        base = torch.cuda.memory_allocated()
        y = m(x)
        # Y (24 MiB) and the rstd (8192 rows x 4 bytes), no pow/mean/rsqrt temporaries
        assert torch.cuda.memory_allocated() - base == 25165824 + 32768
        assert torch.cuda.max_memory_allocated() - base == 25165824 + 32768
        y.sum().backward()
        assert x.grad.shape == x.shape and m.weight.grad.shape == (768,)


def test_rms_norm_recomputed_by_a_non_reentrant_checkpoint_takes_the_fused_kernel():
    # blind166/fj06: a Llama layer of `F.rms_norm` under `checkpoint(use_reentrant=False)`; the
    # recompute runs inside the backward, where no torch-function mode is on: it took the meta
    # composite (an fp32 upcast) and checkpoint refused its saved tensors' metadata. On the GPU the
    # recompute calls `_fused_rms_norm` again, saving the bf16 input and weight and the rstd.
    from torch.utils.checkpoint import checkpoint

    with vramscope.capture():
        w = torch.nn.Parameter(torch.ones(1024, device="cuda", dtype=torch.bfloat16))
        x = torch.empty(4, 512, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = checkpoint(lambda t: torch.nn.functional.rms_norm(t, (1024,), w) * t, x, use_reentrant=False)
        y.float().sum().backward()
        assert x.grad.shape == x.shape and w.grad.dtype == torch.bfloat16


def test_rms_norm_recomputed_by_a_reentrant_checkpoint_takes_the_fused_kernel():
    # CheckpointFunction.backward (torch/utils/checkpoint.py) recomputes `ctx.run_function` inside
    # the backward, where no torch-function mode is on; the GPU's recompute runs `_fused_rms_norm`
    # as the forward did: Y (8 MiB) and the rstd (4,096 rows x 4 bytes), then dX (8 MiB) and
    # dgamma (2 KiB) at the backward's peak, where the meta composite's fp32 upcasts took 125,850,112
    from torch.utils.checkpoint import checkpoint

    with vramscope.capture(gpu="h200"):
        w = torch.nn.Parameter(torch.ones(1024, device="cuda", dtype=torch.bfloat16))
        x = torch.empty(8, 512, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = checkpoint(lambda t: torch.nn.functional.rms_norm(t, (1024,), w), x, use_reentrant=True)
        g = torch.ones_like(y)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        y.backward(g)
        assert torch.cuda.max_memory_allocated() - base == 2 * 8_388_608 + 16_384 + 2_048
        assert x.grad.dtype == torch.bfloat16 and w.grad.shape == (1024,)


def test_layer_norm_backward_over_many_rows_sums_partial_blocks():
    # blind10/j02's H200 per-op record (Swin's first stage): (48, 3136, 96) fp32, M = 150,528 rows
    # of N = 96: dgamma/dbeta as first allocated, 4,704 x 96 partial sums of each, their `sum(0)`s
    # with the reduction's buffer and semaphore: 8 allocations, 5,432,080 bytes beyond the outputs
    def setup():
        x = torch.empty(48, 3136, 96, device="cuda")
        mean = torch.empty(48, 3136, 1, device="cuda")
        w = torch.ones(96, device="cuda")
        return torch.empty_like(x), x, mean, w

    def run(g, x, mean, w):
        return torch.ops.aten.native_layer_norm_backward(g, x, [96], mean, mean, w, w, [True] * 3)

    assert _extra(setup, run) == (8, 5_432_080)
    # below 64Ki rows the gamma/beta kernel writes the outputs directly
    assert (
        _norm._gamma_beta_blocks(
            type("C", (), {"device": type("D", (), {"multi_processor_count": 132})})(), 65536, 96
        )
        == 0
    )


def test_layer_norm_backward_gives_a_contiguous_dx_and_copies_a_strided_gradient_last():
    # blind27/aa07's H200 history (swin_v2_t's last norm, before its permute): dX, dgamma, dbeta,
    # then dY.contiguous() (6,291,456 bytes) freed at the kernel's return; dX contiguous, so the
    # gradient it hands on is not copied again
    with vramscope.capture(gpu="h200"):
        x = torch.empty(32, 8, 8, 768, device="cuda")
        g = torch.empty(32, 768, 8, 8, device="cuda").permute(0, 2, 3, 1)
        mean = torch.empty(32, 8, 8, 1, device="cuda")
        w = torch.ones(768, device="cuda")
        before = torch.cuda.memory_stats()
        out = torch.ops.aten.native_layer_norm_backward(g, x, [768], mean, mean, w, w, [True] * 3)
        after = torch.cuda.memory_stats()
        assert out[0].is_contiguous()
        assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 4
        assert (
            after["allocated_bytes.all.current"] - before["allocated_bytes.all.current"]
            == 6_291_456 + 2 * 3072
        )
        assert (
            after["allocated_bytes.all.peak"] - before["allocated_bytes.all.current"]
            == 2 * 6_291_456 + 2 * 3072
        )


def test_batch_norm_in_evaluation_takes_cudnn_and_makes_its_output_only():
    # blind21/u06's H200 memory history: eval-mode BatchNorm2d of a float32 batch went to
    # cudnn_batch_norm, whose save_mean and save_var are empty; bf16 stays on the native kernel
    with vramscope.capture(gpu="h200"):
        bn = torch.nn.BatchNorm2d(64).cuda().eval()
        x = torch.empty(8, 64, 32, 32, device="cuda")
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        with torch.no_grad():
            y = bn(x)
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 1
        assert y.shape == x.shape
        bn16 = bn.to(torch.bfloat16)
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        with torch.no_grad():
            bn16(x.to(torch.bfloat16))
        # the cast input, the output, save_mean and save_invstd
        assert torch.cuda.memory_stats()["allocation.all.allocated"] - before == 4


@pytest.mark.parametrize(
    ("dtype", "shape", "forward", "backward"),
    [
        # blind50/ax02's H200 per-op truth: cudnn_batch_norm and its backward of channels-last
        # float32 batches, the persistent kernel's workspace beyond the outputs (no native staging)
        (torch.float32, (16, 64, 1024, 32), 4_228_148, 2_797_604),
        (torch.float32, (16, 256, 256, 32), 4_228_160, 2_798_640),
        # blind54/bb06's (RegNetY under fp16 autocast): a half channels-last batch with float
        # weights goes to cudnn_batch_norm too, with the persistent kernel's workspace
        (torch.float16, (96, 32, 112, 112), 3_885_008, 6_423_588),
        (torch.float16, (96, 888, 7, 7), 217_848, 352_344),
        # bn_sweep_h200.jsonl.xz: 72 channels take two 64-channel chunks; a 3-D half batch
        (torch.float32, (8, 72, 112, 112), 1_619_256, 1_072_168),
        (torch.float16, (8, 40, 13, 40, 40), 537_716, 888_868),
        # blind123/ds04's: fewer channels than the sweep's 16 (MuZero's 1- and 2-channel heads)
        (torch.float16, (1024, 2, 15, 15), 14_036, 20_260),
        (torch.float16, (1024, 1, 15, 15), 14_036, 20_260),
    ],
)
def test_channels_last_batch_norm_in_training_takes_cudnns_persistent_workspace(
    dtype, shape, forward, backward
):
    def setup():
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        x = torch.empty(shape, device="cuda", dtype=dtype).to(memory_format=fmt)
        w, m = torch.ones(shape[1], device="cuda"), torch.zeros(shape[1], device="cuda")
        return torch.empty_like(x), x, w, m

    def fwd(g, x, w, m):
        return torch.ops.aten.native_batch_norm(x, w, m, m, m, True, 0.1, 1e-5)

    def bwd(g, x, w, m):
        return torch.ops.aten.native_batch_norm_backward(g, x, w, m, m, m, m, True, 1e-5, [True] * 3)

    assert extra_allocations(setup, fwd, gpu="h200") == (1, forward)
    assert extra_allocations(setup, bwd, gpu="h200") == (1, backward)


def test_float_batch_norm_in_training_takes_no_workspace_where_not_channels_last():
    # cuDNN's SPATIAL mode (an NCHW batch): outputs only, in either direction; a shape outside the
    # measured table is named unmeasured
    def setup():
        x = torch.empty(16, 64, 1024, 32, device="cuda")
        w, m = torch.ones(64, device="cuda"), torch.zeros(64, device="cuda")
        return torch.empty_like(x), x, w, m

    def fwd(g, x, w, m):
        return torch.ops.aten.native_batch_norm(x, w, m, m, m, True, 0.1, 1e-5)

    def bwd(g, x, w, m):
        return torch.ops.aten.native_batch_norm_backward(g, x, w, m, m, m, m, True, 1e-5, [True] * 3)

    assert extra_allocations(setup, fwd, gpu="h200") == (0, 0)
    assert extra_allocations(setup, bwd, gpu="h200") == (0, 0)
    with vramscope.capture(gpu="h200") as cap:
        x = torch.empty(8, 32, 16, 16, device="cuda", dtype=torch.float64).to(
            memory_format=torch.channels_last
        )
        torch.nn.BatchNorm2d(32).cuda().double()(x)
    assert any("channels-last batch-norm forward workspace" in u for u in cap.report()["unmeasured"])


@pytest.mark.parametrize(
    ("sweep", "expected"),
    [
        # 11,710 channels-last problems (2-D and 3-D, 16 to 2,048 channels in multiples of 8, five
        # dtype pairs)
        ("bn_sweep_h200.jsonl.xz", (23420, 9368)),
        # FEW=1: 2 to 15 channels, and BN_CHANNELS: 1 (channels-last strides) and 17 to 1,001 not
        # all multiples of 4, in the two dtype pairs that take cuDNN
        ("bn_sweep_few_h200.jsonl.xz", (14284, 14284)),
    ],
)
def test_the_persistent_workspace_formula_gives_every_measured_call_and_cudnn_is_chosen_as_measured(
    sweep, expected
):
    # validation/run/bn_sweep.py on an H200, forward and backward; a cuDNN call's workspace is what
    # it requested beyond its outputs, one allocation; a native call is the native kernel's
    calls = cudnn = 0
    with lzma.open(FIXTURES / "run" / sweep, "rt") as f:
        for line in f:
            r = json.loads(line)
            p = r["problem"]
            x = torch.empty(p["n"], p["c"], *p["spatial"], dtype=getattr(torch, p["x"]), device="meta")
            w = torch.empty(p["c"], dtype=getattr(torch, p["w"]), device="meta")
            chosen = _norm._cudnn_selected(x, w, w, w, w, True, 1e-5)
            assert chosen == r["op"].startswith("cudnn"), p
            calls += 1
            if chosen:
                which = "backward" if r["op"].endswith("backward") else "forward"
                pixels = x.numel() // p["c"]
                nbytes = _norm.persistent_workspace_bytes(x.dtype, p["c"], pixels, which)
                assert (r["count"] - len(r["new"]), r["requested"] - sum(r["new"])) == (1, nbytes), p
                cudnn += 1
    assert (calls, cudnn) == expected


def test_cudnn_batch_norm_runs_on_and_saves_a_contiguous_copy_of_a_transposed_input():
    # Normalization.cpp `_batch_norm_impl_index`: `input.contiguous(suggest_memory_format())` before
    # `cudnn_batch_norm` (blind78/bz01's H200 per-op truth: PatchTST's (B, C, L) transposes)
    with vramscope.capture(gpu="h200"):
        bn = torch.nn.BatchNorm1d(128).cuda()
        x = torch.empty(64, 63, 128, device="cuda", requires_grad=True)
        base = torch.cuda.memory_allocated()
        y = bn(x.transpose(1, 2))
        # the copy (saved for backward), the contiguous output, save_mean and save_invstd
        assert torch.cuda.memory_allocated() - base == 2 * x.numel() * 4 + 2 * 512
        assert y.is_contiguous()


def test_rms_norm_with_weight_of_another_dtype_runs_the_composite():
    # blind99/cu05's H200 per-op truth: rms_norm of a (32, 256, 12, 64) bf16 input (a strided view,
    # as a q/k norm under bf16 autocast sees it) with an fp32 weight takes rms_norm_composite: the
    # fp32 upcast, pow, mean, rsqrt, the two fp32 muls and the bf16 result, 7 allocations of
    # 114,032,640 bytes, of which the bf16 result stays
    with vramscope.capture():
        qkv = torch.empty(32, 256, 3, 12, 64, device="cuda", dtype=torch.bfloat16)
        x = qkv[:, :, 0]
        w = torch.ones(64, device="cuda")
        before = torch.cuda.memory_stats()
        with torch.inference_mode():
            y = torch.nn.functional.rms_norm(x, [64], w)
        after = torch.cuda.memory_stats()
        assert after["allocation.all.allocated"] - before["allocation.all.allocated"] == 7
        assert after["requested_bytes.all.allocated"] - before["requested_bytes.all.allocated"] == 114_032_640
        assert y.dtype == torch.bfloat16 and y.shape == x.shape


@pytest.mark.parametrize(
    ("dtype", "extra"),
    # bn_sweep_h200.jsonl.xz: batch norm of a (8, 16, 4, 28, 28) channels_last_3d input with weights of
    # its dtype (the general path's var_mean): a bf16 input is reduced from a float32 copy (1,605,632
    # bytes), a float16 one as it is (ReduceOpsUtils.h `make_reduction`); both then take the same
    # buffer and semaphores
    [(torch.bfloat16, (3, 1_806_340)), (torch.float16, (2, 200_708))],
)
def test_general_batch_norm_statistics_copy_a_bf16_input_but_not_a_half_one(dtype, extra):
    def setup():
        x = torch.empty(8, 16, 4, 28, 28, device="cuda", dtype=dtype)
        w = torch.ones(16, device="cuda", dtype=dtype)
        return x.to(memory_format=torch.channels_last_3d), w, torch.zeros_like(w)

    def run(x, w, b):
        return torch.ops.aten.native_batch_norm(x, w, b, b, w, True, 0.1, 1e-5)

    assert extra_allocations(setup, run, gpu="h200") == extra


def test_group_norm_forward_frees_b_before_a():
    # blind189/gg01's H200 memory history (a GroupNorm ResNet-18 at batch 1,024): after Y, mean and
    # rstd, group_norm_kernel.cu's fused parameters a and b ((N, C) accumulators) die in reverse
    # order of declaration, b first (the twin freed a first)
    n, c, g, hw = 1024, 64, 4, 58 * 58
    with vramscope.capture(gpu="h200"):
        x = torch.empty(n, c, 58, 58, device="cuda")
        w = torch.ones(c, device="cuda")
        torch.cuda.memory._record_memory_history()
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        out = torch.ops.aten.native_group_norm(x, w, w, n, c, hw, g, 1e-5)
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
        del out
    addr = {e["addr"]: i for i, e in enumerate(e for e in trace if e["action"] == "alloc")}
    freed = [addr[e["addr"]] for e in trace if e["action"] == "free_requested"]
    # allocations: Y, mean, rstd, a, b; the scratch freed b, a
    assert freed == [4, 3]


def test_mish_backward_is_one_cuda_kernel():
    # ActivationMishKernel.cu: `mish_backward` is one TensorIterator allocating grad_input alone; its
    # CompositeImplicitAutograd kernel (softplus, tanh, sigmoid, products) is for the backends
    # without, which meta tensors take (blind189/gg02's H200 history: the Diffusion Policy's Mish
    # backwards; the twin made seven temporaries of the input's size each)
    with vramscope.capture(gpu="h200"):
        x = torch.empty(256, 1024, 4, device="cuda", requires_grad=True)
        y = torch.nn.functional.mish(x)
        gy = torch.empty_like(y)
        (gx,), (count, req) = counted(lambda: torch.autograd.grad(y, x, gy))
        assert (count, req) == (1, x.numel() * 4)
        assert gx.shape == x.shape and gx.is_contiguous()


def test_mish_backward_under_vmap_is_one_cuda_kernel():
    # blind208/gz01's H200 history: a Q ensemble called by `vmap(functional_call)` (TD-MPC2's
    # Ensemble) records MishBackward0 on the stacked tensors, whose backward outside the vmap runs
    # the CUDA kernel once over the whole ensemble: grad_input alone (the twin took the math kernel's
    # seven temporaries, AutogradMeta's, until `mish_backward` got its own AutogradMeta kernel)
    with vramscope.capture(gpu="h200"):
        x = torch.empty(5, 256, 1024, device="cuda", requires_grad=True)
        y = torch.vmap(torch.nn.functional.mish)(x)
        gy = torch.empty_like(y)
        (gx,), (count, req) = counted(lambda: torch.autograd.grad(y, x, gy))
        assert (count, req) == (1, x.numel() * 4)
        assert gx.shape == x.shape and gx.is_contiguous()


def test_fused_rms_norm_backward_called_as_an_op_copies_a_strided_gradient():
    # FusedRmsNormBackward0 of a DTensor calls `_fused_rms_norm_backward` on it, which DTensor runs
    # on the local tensors: the CUDA kernel makes dY contiguous, so the expanded gradient of a
    # `sum()` is copied (the H100's dt75 probe: DTensor rms_norm float32, +8 MiB at the backward's
    # peak). The meta kernel gave dX and dgamma alone
    def setup(expanded):
        x = torch.empty(2048, 1024, device="cuda")
        rstd = torch.empty(2048, 1, device="cuda")
        gy = torch.ones((), device="cuda").expand(2048, 1024)
        return (gy if expanded else gy.contiguous()), x, rstd, torch.ones(1024, device="cuda")

    def op(gy, x, rstd, w):
        return torch.ops.aten._fused_rms_norm_backward(gy, x, [1024], rstd, w, [True, True])

    assert _extra(lambda: setup(True), op) == (1, 2048 * 1024 * 4)
    assert _extra(lambda: setup(False), op) == (0, 0)


def test_rms_norm_backward_over_many_rows_of_few_columns_sums_per_block_partials():
    # blind200/gr03's H200 per-op truth: an SD3-like MMDiT's q RMSNorm(64) over (16, 1024, 16, 64)
    # bfloat16 (a view of the qkv projection, its gradient a slice of the joint attention's): the
    # backward's 262,144 rows of 64 take the gamma kernel's per-block partial sums, as layer norm's:
    # 8 allocations, 102,760,708 bytes (4 and 15,138,944 over 39,424 rows: no partial sums)
    def grads(rows):
        x = torch.empty(16, rows, 48, 64, device="cuda", dtype=torch.bfloat16)[:, :, :16]
        x.requires_grad_()
        w = torch.nn.Parameter(torch.ones(64, device="cuda", dtype=torch.bfloat16))
        y = torch.nn.functional.rms_norm(x, (64,), w, 1e-6)
        g = torch.empty(16, rows + 154, 16, 64, device="cuda", dtype=torch.bfloat16)[:, 154:]
        return counted(lambda: torch.autograd.grad(y, (x, w), g))[1]

    with vramscope.capture(gpu="h200"):
        assert grads(1024) == (8, 102_760_708)
        assert grads(154) == (4, 15_138_944)


def test_sync_batch_norm_ops_allocate_as_the_cuda_kernels():
    # nn.SyncBatchNorm's CUDA-only ops (torch/nn/modules/_functions.py; Normalization.cu): they had
    # no meta kernel and no CPU kernel, so `--sync-bn` under DDP (timm's train.py, torchvision's
    # references) raised in the twin. An NCHW half input: float statistics, no scratch; the
    # elementwise results take the input's size, the reductions their (C,) outputs only
    def setup():
        x = torch.empty(16, 64, 8, 8, device="cuda", dtype=torch.half)
        w = torch.ones(64, device="cuda", dtype=torch.half)
        return x, w

    stats = extra_allocations(setup, lambda x, w: torch.batch_norm_stats(x, 1e-5))
    assert stats == (0, 0)
    with vramscope.capture():
        x, w = setup()
        (mean, _invstd), (count, req) = counted(lambda: torch.batch_norm_stats(x, 1e-5))
        assert (mean.dtype, mean.shape, count, req) == (torch.float32, (64,), 2, 512)
        gathered = torch.empty(2, 64, device="cuda")
        counts = torch.full((2,), 1024.0, device="cuda")
        (m, v), (count, req) = counted(
            lambda: torch.batch_norm_gather_stats_with_counts(
                x, gathered, gathered, None, None, 0.1, 1e-5, counts
            )
        )
        assert (m.dtype, m.shape, count, req) == (torch.float32, (64,), 2, 512)
        y, (count, req) = counted(lambda: torch.batch_norm_elemt(x, w, w, m, v, 1e-5))
        assert (y.shape, y.is_contiguous(), count, req) == (x.shape, True, 1, 131072)
        grads, (count, req) = counted(
            lambda: torch.batch_norm_backward_reduce(y, x, m, v, w, True, True, False)
        )
        assert [None if g is None else g.dtype for g in grads] == [
            torch.float32,
            torch.float32,
            torch.half,
            None,
        ]
        assert (count, req) == (3, 256 + 256 + 128)
        c = torch.full((2,), 1024, device="cuda", dtype=torch.int32)
        gi, (count, req) = counted(
            lambda: torch.batch_norm_backward_elemt(y, x, m, v, w, grads[0], grads[1], c)
        )
        assert (gi.shape, count, req) == (x.shape, 1, 131072)


def test_sync_batch_norm_channels_last_statistics_stage_as_native_batch_norm():
    # a channels-last input takes `batch_norm_stats_channels_last_cuda_template`, whose staging and
    # semaphores are native_batch_norm's training statistics' (the measured figure above)
    def setup():
        x = torch.empty(48, 32, 112, 112, device="cuda", dtype=torch.bfloat16)
        return (x.to(memory_format=torch.channels_last),)

    assert _extra(setup, lambda x: torch.batch_norm_stats(x, 1e-5)) == (2, 65540)


def test_layer_norm_forward_ad_runs_its_jvp_in_place_as_cuda_tensors_do():
    # blind293/kh01: `layer_norm_jvp` (FunctionsManual.cpp) takes its in-place branch for CUDA
    # tensors; the twin's tensors count as subclass-like (a dispatch mode is on) and took the
    # out-of-place one, two more (N, H) temporaries at its peak than the H100's forward
    import torch.autograd.forward_ad as fwad

    n, h = 512, 1024
    unit = n * h * 4
    with vramscope.capture(gpu="h100"):
        with fwad.dual_level():

            def dual(*shape):
                return fwad.make_dual(torch.randn(*shape, device="cuda"), torch.randn(*shape, device="cuda"))

            x, w, b = dual(n, h), dual(h), dual(h)
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            y = torch.nn.functional.layer_norm(x, (h,), w, b)
            # at the peak: Y, mean and rstd, result_t, (x - mean) and result_p; kept: Y and its tangent
            assert torch.cuda.max_memory_allocated() - base == 4 * unit + 2 * 2048
            assert torch.cuda.memory_allocated() - base == 2 * unit
            primal, tangent = fwad.unpack_dual(y)
            assert primal.shape == tangent.shape == (n, h) and tangent.is_cuda


def test_batch_norm_with_parameters_it_cannot_read_raises_after_its_output():
    # blind300/ko02 on the H100: a `.half()` channels-last teacher under bf16 autocast (convolutions
    # give bf16, the BatchNorms hold half parameters) raised in `batch_norm_elementwise`
    # (cuda/Normalization.cu): the channels-last kernel reads mixed parameters as float
    mib = 1024 * 1024
    with vramscope.capture(gpu="h100"):
        bn = torch.nn.BatchNorm2d(64).cuda().half().eval()
        x = torch.empty(16, 64, 32, 32, device="cuda", dtype=torch.bfloat16)
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            with pytest.raises(RuntimeError, match=r"^expected scalar type Float but found Half$"):
                bn(x.to(memory_format=torch.channels_last))
            # the channels-last copy and the output (save_mean, save_invstd in the small pool)
            assert torch.cuda.max_memory_allocated() - before == 4 * mib + 2 * 512
            assert torch.cuda.memory_allocated() == before
            # the contiguous kernel's accessor check names the parameter
            with pytest.raises(RuntimeError, match=r"^Expected weight to have type Float but got Half$"):
                bn(x)
            bn.train()
            with pytest.raises(RuntimeError, match=r"^expected scalar type Float but found Half$"):
                bn(x.to(memory_format=torch.channels_last))
            # float parameters are the accumulate type: read as mixed, no error; same-dtype ones too
            assert bn.float()(x).dtype == torch.bfloat16
            assert bn.bfloat16()(x.to(memory_format=torch.channels_last)).dtype == torch.bfloat16
            assert torch.cuda.memory_allocated() == before


def test_sync_batch_norm_elemt_checks_its_parameters_as_native_batch_norm():
    # `batch_norm_elemt_cuda` (SyncBatchNorm's forward) runs the same `batch_norm_elementwise`
    with vramscope.capture(gpu="h100"):
        x = torch.empty(8, 32, 16, 16, device="cuda", dtype=torch.bfloat16).to(
            memory_format=torch.channels_last
        )
        stats = torch.zeros(32, device="cuda")
        w = torch.ones(32, device="cuda", dtype=torch.float16)
        before = torch.cuda.memory_allocated()
        with pytest.raises(RuntimeError, match=r"^expected scalar type Float but found Half$"):
            torch.batch_norm_elemt(x, w, w, stats, stats, 1e-5)
        assert torch.cuda.memory_allocated() == before
        assert torch.batch_norm_elemt(x, w.float(), w.float(), stats, stats, 1e-5).shape == x.shape
