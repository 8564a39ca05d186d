"""`nn.MultiheadAttention`'s fused inference path, as the GPU's allocator counted it (ops truth of
validation/run/03_torchvision_vit_inference.py, fixtures/run/truth_h200.tar.xz)."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
import vramscope
from conftest import FIXTURES, ROOT


def _counts(fn):
    before = torch.cuda.memory_stats()
    out = fn()
    after = torch.cuda.memory_stats()
    keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
    return out, tuple(after[k] - before[k] for k in keys)


def test_eval_self_attention_takes_the_native_fast_path():
    with vramscope.capture():
        mha = torch.nn.MultiheadAttention(768, 12, batch_first=True).cuda().eval()
        x = torch.empty(8, 197, 768, device="cuda")
        with torch.no_grad():
            mha(x, x, x, need_weights=False)  # the first call also takes cuBLAS's workspaces
            (out, weights), counts = _counts(lambda: mha(x, x, x, need_weights=False))
        # qkv linear, efficient attention's output, out projection: nothing else
        assert counts == (3, 14524416 + 4841472 + 4841472)
        assert weights is None and out.shape == (8, 197, 768)


def test_half_self_attention_takes_the_native_fast_path_through_cudnn():
    # ops truth of blind67/bo06 (torchvision vit_b_16, fp16, inference mode) on an H200: SDPA picks
    # cuDNN attention for the heads' views, and `_native_multi_head_attention` still takes its SDPA
    # branch: qkv linear, cuDNN attention (output, seed, offset, 256 bytes), out projection
    with vramscope.capture(gpu="h200"):
        mha = torch.nn.MultiheadAttention(768, 12, batch_first=True).cuda().half().eval()
        x = torch.empty(256, 197, 768, device="cuda", dtype=torch.float16)
        with torch.inference_mode():
            mha(x, x, x, need_weights=False)
            (out, weights), counts = _counts(lambda: mha(x, x, x, need_weights=False))
        assert counts == (6, 232390656 + 77463824 + 77463552)
        assert weights is None and out.shape == (256, 197, 768)


def _probe():
    spec = importlib.util.spec_from_file_location(
        "mha_native_probe", ROOT / "validation/run/mha_native_probe.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MHA_NATIVE = json.loads((FIXTURES / "run/attention/mha_native_h200.json").read_text())


@pytest.mark.parametrize("case", MHA_NATIVE["cases"], ids=lambda c: c["name"])
def test_the_native_attention_kernels_allocate_in_the_h200s_order(case):
    # `_native_multi_head_attention` without its SDPA branch (a mask, the weights asked for, a head
    # dim of 25): qkv `matmul`, the (3, B, H, T, Dh) buffer, the scores, the bool mask and
    # `masked_softmax`'s output (or the masked fill and softmax over 1,024 columns), the 0213 copy
    # and the out projection; validation/run/mha_native_probe.py on an H200, event for event
    probe = _probe()
    with vramscope.capture(gpu="h200"), torch.no_grad():
        call = probe.build(case["name"])
        call()
        assert probe.history(call) == [tuple(e) for e in case["events"]]


def test_math_path_softmax_allocates_what_the_gpu_counted():
    # ops truth of blind4/d02 (T5, SDPA's math path) on an H200: _safe_softmax of (16, 8, 128, 128)
    # fp32 took 3 temporaries of 4 + 2097152 + 16384 bytes; its backward one of the gradient's size
    with vramscope.capture():
        x = torch.empty(16, 8, 128, 128, device="cuda")
        out, counts = _counts(lambda: torch.ops.aten._safe_softmax(x, -1))
        assert counts == (4, 8388608 + 4 + 2097152 + 16384)
        _, counts = _counts(lambda: torch.ops.aten._softmax_backward_data(x, out, -1, torch.float32))
        assert counts == (2, 2 * 8388608)


def test_math_path_adds_the_mask_in_place_and_drops_out_with_a_bool_mask():
    # `_scaled_dot_product_attention_math` (attention.cpp) on a plain CUDA run: q*sqrt(scale) and
    # k^T*sqrt(scale), the bmm, `attn.add_(mask)` (no allocation), `_safe_softmax` (its output and
    # three temporaries), `at::dropout` -> `native_dropout` (output and a bool mask), the last bmm.
    # Blind4/d02 (T5, an fp32 math path with a position-bias mask and dropout) came out byte-exact.
    with vramscope.capture(gpu="h200"):
        q, k, v = (torch.empty(2, 4, 64, 32, device="cuda") for _ in range(3))
        # a bias whose last dim is not contiguous (T5's permuted position bias): no fused kernel takes it
        mask = torch.empty(2, 4, 64, 64, device="cuda").transpose(-2, -1)
        scores, bools = 2 * 4 * 64 * 64 * 4, 2 * 4 * 64 * 64
        sdpa = torch.nn.functional.scaled_dot_product_attention
        sdpa(q, k, v, mask, 0.1)  # the first call also takes cuBLAS's workspaces
        _, counts = _counts(lambda: sdpa(q, k, v, mask, 0.1))
        assert counts == (
            10,
            2 * 65536 + scores + (scores + 4 + bools + 2 * 4 * 64) + (scores + bools) + 65536,
        )


def test_eval_encoder_layer_takes_the_fused_layer_path():
    # ops truth of validation/run/10 on an H200: each `_transformer_encoder_layer_fwd` after the
    # first made 11 allocations of 604241920 bytes (B, T, E = 32, 512, 768, fp32, relu)
    with vramscope.capture(gpu="h200"):
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True).cuda().eval()
        x = torch.empty(32, 512, 768, device="cuda")
        with torch.no_grad():
            layer(x)
            out, counts = _counts(lambda: layer(x))
        assert counts == (11, 604241920) and out.shape == x.shape


def test_the_backend_follows_the_gpus_capability():
    # sdp_utils.cpp's hardware checks, as the twin's GPU profiles hold them (SdpaSupport)
    from vramscope import _attention

    def picked(gpu, dtype, d=64, grad=False, dropout=0.0):
        with vramscope.capture(gpu=gpu) as cap:
            q = torch.empty(2, 8, 256, d, device="cuda", dtype=dtype, requires_grad=grad)
            dev = cap.device
            return _attention.backend(q, q, q, None, dropout, False, False, dev.capability, dev.sdpa)

    assert picked("h100", torch.bfloat16) == "cudnn"  # sm90 prefers cuDNN
    assert picked("a100-80gb", torch.bfloat16) == "flash"  # sm80: flash first
    assert picked("v100", torch.float16) == "efficient"  # sm70: no flash, no cuDNN
    assert picked("v100", torch.bfloat16) == "math"  # the efficient kernel takes bf16 from sm80
    assert picked("t4", torch.float32) == "efficient"
    # sm89 does not train flash with head dims in (192, 224]
    assert picked("rtx4090", torch.float16, d=200) == "flash"
    assert picked("rtx4090", torch.float16, d=200, grad=True) == "efficient"


@pytest.mark.parametrize("causal", [True, False])
def test_flex_attention_outside_compile_runs_the_dense_composite(causal):
    # eager flex_attention on a CUDA tensor is PyTorch's dense composite: the fp32 scores of
    # (1, 2, 256, 256) are materialized (512 KiB), forward and backward; without a block mask its
    # no-op mask function makes a tensor on its arguments' device (traced: a `device=` argument)
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    with vramscope.capture(gpu="h200"):
        q, k, v = (torch.randn(1, 2, 256, 64, device="cuda", requires_grad=True) for _ in range(3))
        mask = (
            create_block_mask(lambda b, h, i, j: i >= j, 1, None, 256, 256, device="cuda") if causal else None
        )
        torch.cuda.reset_peak_memory_stats()
        out = flex_attention(q, k, v, block_mask=mask)
        assert out.is_cuda and out.shape == (1, 2, 256, 64)
        assert torch.cuda.max_memory_allocated() - 3 * 131072 >= 1 << 19
        out.sum().backward()
        assert q.grad is not None and q.grad.shape == q.shape


def test_flex_attention_score_mod_indexing_a_cuda_tensor_runs_eagerly():
    # blind61/bi05: an ALiBi score_mod reads `slopes[h]`; flex_attention's eager backward graph is
    # traced under a fake mode, whose index values are fake tensors the bounds check cannot read
    from torch.nn.attention.flex_attention import flex_attention

    with vramscope.capture(gpu="h200"):
        slopes = torch.exp2(-torch.arange(1, 3, device="cuda", dtype=torch.float32))
        q, k, v = (torch.randn(1, 2, 128, 64, device="cuda", requires_grad=True) for _ in range(3))
        out = flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: s - slopes[h] * (i - j))
        out.sum().backward()
        assert q.grad is not None and q.grad.shape == q.shape


def test_flex_attention_eager_backward_returns_a_captured_bias_gradient():
    # a score_mod reading a learnable bias (`bias[h, i - j + 127]`, requires grad): its joint graph
    # holds `flex_lib::zeros_and_scatter`, whose batching rule the backward's vmap runs; traced over
    # the simulated tensors under the twin's dispatch mode it held the op's parts (`zeros(device=
    # cpu)`, `index_put`) and the backward stopped in functorch ("batched == nullptr")
    from torch.nn.attention.flex_attention import flex_attention

    with vramscope.capture(gpu="h200"):
        q = torch.randn(1, 2, 128, 64, device="cuda", requires_grad=True)
        bias = torch.zeros(2, 255, device="cuda", requires_grad=True)
        out = flex_attention(q, q, q, score_mod=lambda s, b, h, i, j: s + bias[h, i - j + 127])
        out.sum().backward()
        assert bias.grad is not None and bias.grad.shape == (2, 255) and bias.grad.is_cuda


def test_math_attentions_causal_bool_mask_dies_as_its_additive_mask_is_made():
    # blind88/cj05: 3-D fp16 q, k, v (16, 1800, 128) under inference mode, is_causal, take the math
    # path; `attn_mask = convert_boolean_attn_mask(attn_mask, ...)` (attention.cpp) frees the
    # (1800, 1800) bool mask before the scores. The H200's per-op record of the call: 18
    # allocations, 685,555,212 bytes; the twin held the mask to the end (cj05's peaks 4 MiB over)
    n, heads, hd = 1800, 16, 128
    with vramscope.capture(gpu="h200"), torch.inference_mode():
        q = torch.randn(n, heads, hd, device="cuda", dtype=torch.float16).transpose(0, 1)
        torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")  # the cuBLAS workspace
        torch.cuda.memory._record_memory_history()
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
        sizes = [e["size"] for e in trace if e["action"] == "alloc"]
        assert (len(sizes), sum(sizes)) == (18, 685_555_212)
        events = [(e["action"], e["size"]) for e in trace]
        mask_freed = [i for i, e in enumerate(events) if e == ("free_completed", n * n)][-1]
        assert mask_freed < events.index(("alloc", heads * n * n * 4))


def test_math_attentions_weights_die_after_its_temporaries():
    # blind168/fl04: a Conformer's bf16 self-attention with a boolean key padding mask, head dim 36
    # and dropout takes the math path; `_scaled_dot_product_attention_math` returns (output,
    # weights) and `scaled_dot_product_attention` drops the bf16 weights only after the function's
    # fp32 upcasts are freed (the H200's history); the twin freed them before (2 MiB of reserved)
    b, heads, n, hd = 4, 4, 200, 36
    with vramscope.capture(gpu="h200"):
        q = torch.randn(b, n, heads, hd, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        mask = torch.ones(b, 1, 1, n, device="cuda", dtype=torch.bool)
        torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")  # the cuBLAS workspace
        torch.cuda.memory._record_memory_history()
        start = len(torch.cuda.memory._snapshot()["device_traces"][0])
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask, dropout_p=0.1)
        trace = torch.cuda.memory._snapshot()["device_traces"][0][start:]
        frees = [e["size"] for e in trace if e["action"] == "free_requested"]
        weights, upcast = b * heads * n * n * 2, b * heads * n * hd * 4
        assert frees.index(weights) > max(i for i, s in enumerate(frees) if s == upcast)


def test_jagged_attention_takes_flash_as_an_h200_does():
    with vramscope.capture(gpu="h200"):
        offsets = torch.tensor([0, 100, 164, 300], device="cuda")
        values = torch.randn(300, 4, 64, device="cuda", dtype=torch.bfloat16)
        x = torch.nested.nested_tensor_from_jagged(values, offsets).transpose(1, 2)
        params = torch.backends.cuda.SDPAParams(x, x, x, None, 0.0, False, False)
        assert torch.backends.cuda.can_use_flash_attention(params)
        assert not torch.backends.cuda.can_use_efficient_attention(
            torch.backends.cuda.SDPAParams(x.requires_grad_(), x, x, None, 0.0, False, False)
        )
        with torch.no_grad():
            out = torch.nn.functional.scaled_dot_product_attention(x, x, x)
        assert out.is_nested and out.shape[0] == 3


def test_flex_attentions_dense_path_copies_a_permuted_query_in_its_matmul():
    # the dense composite's `query.to(float32) @ key...T` is `matmul`'s C++ composite below autograd:
    # `_matmul_impl` reshapes a permuted query with a copy (blind61/bi05's H200 history: a third
    # fp32 copy of the query's size); a contiguous query needs none
    from torch.nn.attention.flex_attention import flex_attention

    def allocations(permuted):
        with vramscope.capture(gpu="h200"):
            if permuted:
                q = torch.randn(2, 256, 2, 64, device="cuda", requires_grad=True).transpose(1, 2)
            else:
                q = torch.randn(2, 2, 256, 64, device="cuda", requires_grad=True)
            k, v = (torch.randn(2, 2, 256, 64, device="cuda", requires_grad=True) for _ in range(2))
            before = torch.cuda.memory_stats()["allocation.all.allocated"]
            flex_attention(q, k, v)
            return torch.cuda.memory_stats()["allocation.all.allocated"] - before

    assert allocations(True) == allocations(False) + 1


def test_a_left_aligned_padding_mask_runs_the_encoders_nested_fast_path():
    # blind77/by06 on the H200 (fixtures/run/run_blind77_h200.jsonl): 12 fp16 layers, 768 wide, a
    # batch of 32 x 1,024 packed to its 18,417 valid tokens, each layer on the nested tensor
    with vramscope.capture(gpu="h200"):
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.1, batch_first=True)
        model = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=True)
        model = model.to(device="cuda", dtype=torch.float16).eval()
        torch.cuda.reset_peak_memory_stats()
        x = torch.randn(32, 1024, 768, device="cuda", dtype=torch.float16)
        lengths = torch.linspace(128, 1024, 32, device="cuda").long()
        pad = torch.arange(1024, device="cuda")[None, :] >= lengths[:, None]
        with torch.inference_mode():
            y = model(x, src_key_padding_mask=pad)
        assert y.shape == (32, 1024, 768)
        assert torch.cuda.max_memory_allocated() == 458759168
        assert torch.cuda.memory_reserved() == 564133888


def test_sdpa_frees_its_other_results_first_to_last():
    # the std::tuple local of scaled_dot_product_attention (attention.cpp) dies element by element in
    # order (libstdc++); blind16/p07's H200 history under save_on_cpu: the logsumexp, then seed, offset
    with vramscope.capture(gpu="h200"):
        q = torch.empty(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch.cuda.memory._record_memory_history()
        with torch.autograd.graph.save_on_cpu():
            out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
        frees = [e["size"] for e in trace if e["action"] == "free_completed"]
        assert frees[-3:] == [2 * 4 * 256 * 4, 8, 8] and out.is_cuda


def test_the_encoder_fast_paths_ffn_keeps_its_input_through_both_linears():
    # blind84/cf02's H200 history (a pre-norm encoder, bf16, inference mode): transformer.cpp's
    # `ffn` holds the second norm's output (its argument) while the second linear allocates, so the
    # layer's peak is the residual, that output, the 3,072-wide hidden and the second linear's output
    act = 64 * 257 * 768 * 2
    with vramscope.capture(gpu="h200"):
        layer = torch.nn.TransformerEncoderLayer(
            768, 12, 3072, 0.0, "gelu", batch_first=True, norm_first=True
        )
        layer = layer.to(device="cuda", dtype=torch.bfloat16).eval()
        x = torch.empty(64, 257, 768, device="cuda", dtype=torch.bfloat16)
        with torch.inference_mode():
            layer(x)  # the first call also takes cuBLAS's workspaces
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            y = layer(x)
        assert torch.cuda.max_memory_allocated() - base == 3 * act + 4 * act
        assert y.shape == x.shape


def test_an_encoder_the_gpu_would_pack_nested_keeps_its_layers_off_the_dense_masked_path(monkeypatch):
    # fp32 with a right-padded key mask: TransformerEncoder packs a nested tensor on the GPU (the
    # twin models it: the memory-efficient kernel); its layers do not run the dense masked kernels
    # (`_mha_explicit`), which the same layer takes when called on its own
    from vramscope import _attention

    calls = []
    explicit = _attention._mha_explicit
    monkeypatch.setattr(_attention, "_mha_explicit", lambda *a: calls.append(1) or explicit(*a))
    with vramscope.capture(gpu="h200"), torch.no_grad():
        layer = torch.nn.TransformerEncoderLayer(64, 4, 256, batch_first=True)
        encoder = torch.nn.TransformerEncoder(layer, 2).cuda().eval()
        x = torch.randn(4, 32, 64, device="cuda")
        pad = (
            torch.arange(32, device="cuda")[None].expand(4, 32)
            >= torch.tensor([32, 20, 10, 5], device="cuda")[:, None]
        )
        encoder(x, src_key_padding_mask=pad)
        assert calls == []
        encoder.layers[0](x, src_key_padding_mask=pad)
        assert calls == [1]


def _packed_encoder_allocations(lengths, s, e, dtype):
    """A one-layer `TransformerEncoder` (4 heads, ffn 256) in `dtype` over a (len(lengths), s, e)
    batch padded right to `lengths`, called twice (the first call also takes cuBLAS's workspaces):
    its output and the sizes the second call allocated, in order."""
    n = len(lengths)
    with vramscope.capture(gpu="h200"):
        layer = torch.nn.TransformerEncoderLayer(e, 4, 256, batch_first=True)
        encoder = torch.nn.TransformerEncoder(layer, 1).cuda().to(dtype).eval()
        x = torch.randn(n, s, e, device="cuda", dtype=dtype)
        pad = (
            torch.arange(s, device="cuda")[None].expand(n, s) >= torch.tensor(lengths, device="cuda")[:, None]
        )
        encoder(x, src_key_padding_mask=pad)
        torch.cuda.memory._record_memory_history()
        y = encoder(x, src_key_padding_mask=pad)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
    return y, [e_["size"] for e_ in trace if e_["action"] == "alloc"]


def test_an_fp32_encoder_packs_its_padded_batch_and_runs_the_efficient_kernel_on_it():
    # blind179/fw05's H200 history (6 fp32 layers of 512, 8 heads, eval under inference_mode, a
    # 1,024 x 128 batch of 79,203 valid tokens): each layer's attention is
    # `_scaled_dot_product_efficient_attention_nestedtensor_cuda`: the qkv linear over the T tokens,
    # the two cumulative lengths, the (T, E) output and no logsumexp, then the out projection
    n, s, e = 4, 32, 64
    lengths = [32, 20, 10, 5]
    t = sum(lengths)
    with torch.inference_mode():
        y, sizes = _packed_encoder_allocations(lengths, s, e, torch.float32)
    qkv = sizes.index(3 * t * e * 4)
    assert sizes[qkv + 1 : qkv + 5] == [(n + 1) * 4, (n + 1) * 4, t * e * 4, t * e * 4]
    assert y.shape == (n, s, e)


def test_a_bf16_encoder_packs_its_batch_through_the_generic_fallbacks():
    # nested_bf16_probe_s40's H200 history: nested_from_padded_cuda and to_padded_tensor's CUDA kernel
    # take fp32 and fp16 only; in bf16 the generic ones run: per row a bool (length, E) mask padded
    # to (S, E), the masks stacked and masked_select (nonzero's (T * E, 3) positions); at the end each
    # row padded to the longest, stacked, then padded to the input's size
    n, s, e = 4, 32, 64
    lengths = [32, 20, 10, 5]
    t, longest = sum(lengths), max(lengths)
    with torch.no_grad():
        y, sizes = _packed_encoder_allocations(lengths, s, e, torch.bfloat16)
    rows = [b for length in lengths for b in (length * e, s * e)]
    first = sizes.index(rows[0])
    assert sizes[first : first + 2 * n + 2] == [*rows, n * s * e, 4]
    assert t * e * 3 * 8 in sizes and t * e * 2 in sizes
    assert sizes[-n - 2 :] == [longest * e * 2] * n + [n * longest * e * 2, n * s * e * 2]
    assert y.shape == (n, s, e) and y.dtype == torch.bfloat16


def test_an_encoder_under_autocast_still_runs_the_left_aligned_check():
    # blind143/em06's per-op truth on the H200: in eval under fp16 autocast, TransformerEncoder runs
    # `_nested_tensor_from_mask_left_aligned` (8 allocations, 122,671 bytes over a 30 x 194 mask)
    # before the autocast condition rules the nested path out; the layers then stay dense
    n, s = 30, 194
    with vramscope.capture(gpu="h200"), torch.no_grad():
        layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
        encoder = torch.nn.TransformerEncoder(layer, 2).cuda().eval()
        ids = torch.randint(3, 100, (n, s), device="cuda")
        ids[:, 150:] = 0
        x = torch.randn(n, s, 512, device="cuda")
        torch.cuda.memory._record_memory_history()
        with torch.autocast("cuda", dtype=torch.float16):
            y = encoder(x, src_key_padding_mask=ids == 0)
        trace = torch.cuda.memory._snapshot()["device_traces"][0]
    sizes = [e["size"] for e in trace if e["action"] == "alloc"]
    check = [n, n * (s + 1), 4 * n * (s + 1), 8 * n, 8 * n * s, 8 * n * s, n, 1]
    # right after the `logical_not` of the mask's float form (`_canonical_mask`) the check takes
    at = sizes.index(n * s * 4)
    assert sizes[at + 1 : at + 2 + len(check)] == [n * s, *check] and sum(check) == 122671
    assert y.shape == (n, s, 512)


def test_sdpa_under_vmap_of_grad_takes_the_fused_kernel_by_its_batch_rule():
    # torch.func's wrappers reach F.scaled_dot_product_attention with the device's tensors under
    # them: the choice is the plain run's (efficient, fp32 with a float mask) and functorch's
    # batch rule runs the kernel once over the vmapped batch (BatchRulesLinearAlgebra.cpp); the
    # composite's choice on meta tensors took the math path (blind144/en03's per-sample
    # gradients on the H200: 268 efficient forwards, 32 backwards each by the batched fallback)
    from torch.func import grad, vmap

    with vramscope.capture() as cap:
        q = torch.empty(4, 1, 8, 128, 32, device="cuda")
        mask = torch.zeros(4, 1, 1, 128, 128, device="cuda")

        def f(q, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask).sum()

        g = vmap(grad(f))(q, mask)
        assert g.shape == q.shape
        assert cap.sdpa_backends == {"efficient": 1}


def test_an_outer_backward_through_a_vmapped_efficient_sdpa_raises_the_lse_alignment_check():
    # blind218/hj02 on an H200: a vmapped ensemble (stack_module_state, functional_call) whose loss is
    # backpropagated outside vmap. `should_compute_logsumexp` reads the BatchedTensor's
    # `requires_grad()`, false, so the forward saves an empty (B, H, 0) logsumexp (strides (H, 1, 1))
    # and `_efficient_attention_backward` raises from `check_supported` (kernel_backward.h) after it
    # allocated its gradients and workspace, all freed as the error unwinds
    with vramscope.capture(gpu="h200"):
        w = torch.empty(3, 64, 64, device="cuda", requires_grad=True)
        x = torch.empty(3, 4, 128, 64, device="cuda")
        mask = torch.ones(3, 4, 128, dtype=torch.bool, device="cuda")

        def member(w, x, mask):
            q = (x @ w).view(4, 128, 2, 32).transpose(1, 2)
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask[:, None, None, :])

        out = torch.vmap(member)(w, x, mask)
        loss = out.sum()
        before = torch.cuda.memory_allocated()
        with pytest.raises(RuntimeError, match=r"^LSE is not correctly aligned \(strideH\)$"):
            loss.backward()
        assert torch.cuda.memory_allocated() == before
        assert w.grad is None
        # the same attention called outside vmap computes its logsumexp and runs backward
        member(w[0], x[0], mask[0]).sum().backward()
        assert w.grad.shape == w.shape


def test_flash_backward_with_gqa_heads_expands_dk_and_dv_as_the_h200_does():
    # blind146/ep06's per-op records on an H200 (bf16, 6 query / 2 key-value heads of 256, 1,100
    # tokens, is_causal, enable_gqa, flash forced): dq, dk, dv, softmax_d (6, 6, 1152) and dq_accum
    # (6, 1152, 6, 256) in fp32, then dK and dV expanded to (6, 1100, 6, 256) (flash_api.cpp mha_bwd):
    # 7 allocations, 116,975,616 bytes
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with vramscope.capture(gpu="h200"):
        bf = torch.bfloat16
        qb = torch.empty(6, 1100, 6, 256, device="cuda", dtype=bf, requires_grad=True)
        kb = torch.empty(6, 1100, 2, 256, device="cuda", dtype=bf, requires_grad=True)
        vb = torch.empty(6, 1100, 2, 256, device="cuda", dtype=bf, requires_grad=True)
        q, k, v = (t.transpose(1, 2) for t in (qb, kb, vb))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        grad = torch.empty(6, 1100, 6, 256, device="cuda", dtype=bf).transpose(1, 2)
        _, counts = _counts(lambda: out.backward(grad))
        assert counts == (7, 116975616)
        assert kb.grad.shape == (6, 1100, 2, 256)


def test_flash_forward_with_dropout_makes_rng_state_twice_as_the_h200_does():
    # flash_api.cpp mha_fwd: `rng_state` (16 bytes) and `_unused` (8), then under `p_dropout > 0`
    # `rng_state` made again, the first freed as it is reassigned (blind192/gj01's H200 history: 16,
    # 8, 16, the first 16 freed inside mha_fwd). bf16 (8, 8, 81, 24) with grad: the output (248,832
    # bytes) and the logsumexp (20,736), then 16, 8, 16: 5 allocations; 4 without dropout
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with vramscope.capture(gpu="h200"):
        qb = torch.empty(8, 81, 8, 24, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q = qb.transpose(1, 2)

        def sdpa(p):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=p)

        out, counts = _counts(lambda: sdpa(0.2))
        assert counts == (5, 248832 + 20736 + 16 + 8 + 16)
        assert torch.cuda.memory_allocated() % 512 == 0
        del out
        _, counts = _counts(lambda: sdpa(0.0))
        assert counts == (4, 248832 + 20736 + 16 + 8)


def test_causal_bias_lower_right_runs_flash_then_the_efficient_kernel_with_its_backward():
    # torch/nn/attention/bias.py: `CausalBias` is a tensor subclass made by the legacy constructor,
    # which refused the twin's dispatch mode; its `_dispatch` asks `can_use_flash_attention` (False
    # on meta tensors before), then calls `_efficient_attention_forward` with custom_mask_type 2
    from torch.nn.attention.bias import causal_lower_right

    with vramscope.capture(gpu="h200"):
        q = torch.empty(2, 4, 100, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(2, 4, 300, 64, device="cuda", dtype=torch.bfloat16)
        params = torch.backends.cuda.SDPAParams(q, k, k, None, 0.0, False, False)
        assert torch.backends.cuda.can_use_flash_attention(params)
        bias = causal_lower_right(100, 300)
        with torch.no_grad():
            before = torch.cuda.memory_allocated()
            out = torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=bias)
        # flash's output (2, 100, 4, 64) bf16 and its fp32 logsumexp (2, 4, 100), freed with the tuple
        assert out.shape == (2, 4, 100, 64) and torch.cuda.memory_allocated() - before == 102400
        q, k = (t.float().requires_grad_() for t in (q, k))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, k, attn_mask=bias)
        out.sum().backward()
        assert q.grad.shape == q.shape and k.grad.shape == k.shape


def test_sdpa_called_as_an_aten_op_takes_the_cuda_backend_choice():
    """An exported program's module runs `aten.scaled_dot_product_attention` as an op, not through
    `F.scaled_dot_product_attention`: the composite still asks the CUDA backend choice for a CUDA
    query (cuDNN on the H200 here), not the meta tensors' math path with its fp32 scores
    (blind258/iy05's H200 reserved: two 16 MiB segments fewer per prefill)."""
    peaks = []
    with vramscope.capture(gpu="h200") as cap:
        q = torch.randn(4, 16, 256, 64, device="cuda", dtype=torch.bfloat16)
        k, v = torch.randn_like(q), torch.randn_like(q)
        mask = torch.zeros(4, 1, 256, 256, device="cuda", dtype=torch.bfloat16)
        for fn in (
            torch.ops.aten.scaled_dot_product_attention.default,
            torch.nn.functional.scaled_dot_product_attention,
        ):
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            with torch.no_grad():
                out = fn(q, k, v, mask)
            peaks.append(torch.cuda.max_memory_allocated() - base)
            del out
        backends = cap.report()["sdpa_backends"]
    assert peaks[0] == peaks[1] and backends == {"cudnn": 2}


def test_sdpa_with_the_math_kernel_off_raises_where_no_fused_kernel_passes():
    # cuda/sdp_utils.cpp `select_sdp_backend`: math is taken only when enabled; 3-D q, k, v (timm's
    # SAM ViT: (B * heads, N, d)) fail every fused kernel's `check_tensor_shapes`, so under
    # `sdpa_kernel(EFFICIENT_ATTENTION)` the GPU raises "No available kernel" (the twin ran math);
    # every backend off is `_fused_sdp_choice_cuda`'s "No viable backend"; with cuDNN's priority
    # after math (the default order off sm90/sm100) a math-less context still reaches cuDNN
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from vramscope import _attention

    with vramscope.capture(gpu="h100"):
        q3 = torch.empty(24, 1024, 64, device="cuda", dtype=torch.bfloat16)
        bias = torch.empty(24, 1024, 1024, device="cuda", dtype=torch.bfloat16)
        for be in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            with sdpa_kernel(be), pytest.raises(RuntimeError, match="No available kernel"):
                torch.nn.functional.scaled_dot_product_attention(q3, q3, q3, attn_mask=bias)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
            out = torch.nn.functional.scaled_dot_product_attention(q3, q3, q3, attn_mask=bias)
        assert out.shape == (24, 1024, 64)
        q4 = q3.view(2, 12, 1024, 64)
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            torch.nn.functional.scaled_dot_product_attention(q4, q4, q4)
        prev = [torch.backends.cuda.math_sdp_enabled(), torch.backends.cuda.flash_sdp_enabled()]
        try:
            torch.backends.cuda.enable_math_sdp(False)
            torch.backends.cuda.enable_flash_sdp(False)
            torch.backends.cuda.enable_mem_efficient_sdp(False)
            torch.backends.cuda.enable_cudnn_sdp(False)
            with pytest.raises(RuntimeError, match="No viable backend"):
                torch.nn.functional.scaled_dot_product_attention(q4, q4, q4)
        finally:
            torch.backends.cuda.enable_math_sdp(prev[0])
            torch.backends.cuda.enable_flash_sdp(prev[1])
            torch.backends.cuda.enable_mem_efficient_sdp(True)
            torch.backends.cuda.enable_cudnn_sdp(True)

    with vramscope.capture(gpu="a100-80gb") as cap:
        q = torch.empty(2, 8, 256, 64, device="cuda", dtype=torch.bfloat16)
        dev = cap.device
        args = (q, q, q, None, 0.0, False, False, dev.capability, dev.sdpa)
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            assert _attention.backend(*args) == "cudnn"
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]):
            assert _attention.backend(*args) == "math"


def test_a_mask_of_fewer_than_two_dims_raises_where_cudnns_mask_check_reads_it():
    # blind310/ky05 on the H100: `can_use_cudnn_attention` (first on sm90) reaches
    # `check_attn_mask_shape` past the 4-d shapes and the fp16/bf16 dtypes, whose
    # `sym_size(-2)` of a 1-d mask raises IndexError; a mask that needs grad is refused before the
    # read, and fp32 inputs stop at the dtype check (the memory-efficient kernel broadcasts it)
    F = torch.nn.functional
    with vramscope.capture(gpu="h100"):
        q = torch.randn(16, 8, 1, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(16, 8, 256, 64, device="cuda", dtype=torch.bfloat16)
        mask = torch.arange(256, device="cuda") <= 64
        with pytest.raises(IndexError, match=r"expected to be in range of \[-1, 0\], but got -2"):
            F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
        # C++ on the GPU: a temporary argument is freed as the error unwinds, while it lives
        before = torch.cuda.memory_allocated()
        try:
            F.scaled_dot_product_attention(q.clone(), k, k, attn_mask=mask)
        except IndexError:
            assert torch.cuda.memory_allocated() == before
        with pytest.raises(IndexError, match="tensor has no dimensions"):
            F.scaled_dot_product_attention(q, k, k, attn_mask=mask[0])
        out = F.scaled_dot_product_attention(q.float(), k.float(), k.float(), attn_mask=mask)
        assert out.shape == (16, 8, 1, 64)


def test_sdpa_arguments_the_parser_refuses_raise_its_type_error():
    # python_arg_parser.cpp: blind305/kt05's draft passed `k=`/`v=` (the stand-in failed with
    # KeyError 'key'); the messages are torch 2.11's, its "argument"/"arguments" swap included
    F = torch.nn.functional
    with vramscope.capture(gpu="h100"):
        q = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16)
        cases = [
            ((q,), {"k": q, "v": q}, 'missing 2 required positional argument: "key", "value"'),
            ((q, q), {}, 'missing 1 required positional arguments: "value"'),
            ((q,), {"value": q}, 'missing 2 required positional argument: "key", "value"'),
            ((q, q, q), {"key": q}, "got multiple values for argument 'key'"),
            (
                (q, q, q, None, 0.0, False, None),
                {},
                "takes from 3 to 6 positional arguments but 7 were given",
            ),
            ((q, q, q), {"mask": None}, "got an unexpected keyword argument 'mask'"),
        ]
        for args, kwargs, message in cases:
            with pytest.raises(TypeError) as info:
                F.scaled_dot_product_attention(*args, **kwargs)
            assert str(info.value) == f"scaled_dot_product_attention() {message}"
        assert F.scaled_dot_product_attention(q, key=q, value=q, scale=0.125).shape == q.shape
