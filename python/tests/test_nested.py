"""Strided nested tensors (`torch.nested.nested_tensor(list)` without `layout=torch.jagged`) on the
simulated GPU: one buffer of the components, the nested kernels' dense ops on it (`_nested.py`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import vramscope
from torch.nn.attention import SDPBackend, sdpa_kernel


def _delta(fn):
    """(allocations made, bytes requested, change of memory_allocated) over `fn()`."""
    before = torch.cuda.memory_stats()
    live = torch.cuda.memory_allocated()
    out = fn()
    after = torch.cuda.memory_stats()
    keys = ("allocation.all.allocated", "requested_bytes.all.allocated")
    return out, (*(after[k] - before[k] for k in keys), torch.cuda.memory_allocated() - live)


def test_nested_tensor_of_device_tensors_is_one_buffer_of_their_elements():
    # `wrap_tensor_node`'s slow path: `at::cat` of the flattened components; the metadata is on the host
    with vramscope.capture(gpu="h200"):
        parts = [torch.randn(n, 64, device="cuda", dtype=torch.float16) for n in (5, 7, 3)]
        nt, counts = _delta(lambda: torch.nested.nested_tensor(parts))
        assert counts == (1, 15 * 64 * 2, 2048)
        assert nt.is_nested and nt.is_cuda and nt.dtype == torch.float16
        assert nt.dim() == 3 and nt.size(0) == 3 and nt.size(-1) == 64
        with pytest.raises(RuntimeError, match="irregular"):
            nt.size(1)
        assert [tuple(t.shape) for t in nt.unbind()] == [(5, 64), (7, 64), (3, 64)]


def test_nested_tensor_of_host_tensors_is_packed_on_the_host_and_copied_once():
    with vramscope.capture(gpu="h200"):
        host = [torch.randn(n, 64) for n in (5, 7, 3)]
        nt, counts = _delta(lambda: torch.nested.nested_tensor(host, device="cuda", dtype=torch.float16))
        assert counts == (1, 15 * 64 * 2, 2048)
        lists, counts = _delta(
            lambda: torch.nested.nested_tensor([[1.0, 2.0], [3.0, 4.0, 5.0]], device="cuda")
        )
        assert counts == (1, 5 * 4, 512) and lists.dtype == torch.float32 and nt.is_cuda


def test_nested_tensor_of_another_dtype_casts_the_concatenation():
    # `nt_buffer.to(options)`: the fp16 `cat` (freed) and its fp32 copy
    with vramscope.capture(gpu="h200"):
        parts = [torch.randn(n, 64, device="cuda", dtype=torch.float16) for n in (5, 7, 3)]
        _, counts = _delta(lambda: torch.nested.nested_tensor(parts, dtype=torch.float32))
        assert counts == (2, 15 * 64 * (2 + 4), 4096)


def _attention(nt, w, heads):
    # the tutorial's `CausalSelfAttention.forward` (pytorch/tutorials' scaled_dot_product_attention_tutorial)
    qkv = F.linear(nt, w)
    b, e = qkv.size(0), qkv.size(2)
    q, k, v = (t.view(b, -1, heads, e // 3 // heads).transpose(1, 2) for t in qkv.chunk(3, -1))
    y = F.scaled_dot_product_attention(q, k, v)
    return y.transpose(1, 2).view(b, -1, e // 3)


def test_nested_attention_runs_the_varlen_flash_kernel_on_the_projections_buffer():
    # `nested_linear`: the dense linear of the (T, in) buffer (and the first cuBLAS workspace);
    # the chunks' views are safe to read as storage (`is_safe_to_get_storage_as_tensor`): no copy;
    # `sdpa_nested_preprocessing`'s cumulative lengths of q and k, then `_flash_attention_forward`:
    # the (T, H, D) output, the fp32 (H, T) logsumexp, rng_state and the offset
    with vramscope.capture(gpu="h200"):
        lens, e, h = (5, 7, 3), 64, 2
        nt = torch.nested.nested_tensor([torch.randn(n, e, device="cuda", dtype=torch.float16) for n in lens])
        w = torch.randn(3 * e, e, device="cuda", dtype=torch.float16)
        t = sum(lens)
        with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            y, counts = _delta(lambda: _attention(nt, w, h))
        workspace = 32 * 1024 * 1024
        assert counts[:2] == (8, workspace + t * 3 * e * 2 + 2 * 4 * 4 + t * e * 2 + h * t * 4 + 16 + 8)
        # the projections' buffer dies with the function's locals, the attention's stays (y views it)
        assert counts[2] == workspace + 2048
        assert (
            y.is_nested
            and y.is_contiguous()
            and [tuple(c.shape) for c in y.unbind()] == [(n, e) for n in lens]
        )


def test_nested_attention_with_grad_keeps_what_its_backward_saves():
    # the flash node saves q, k and v (views of the projections' buffer), the logsumexp, both
    # cumulative lengths, rng_state and the offset: all of them stay while y lives
    def run(grad):
        with vramscope.capture(gpu="h200"):
            nt = torch.nested.nested_tensor(
                [torch.randn(n, 64, device="cuda", dtype=torch.float16) for n in (5, 7)]
            )
            w = torch.randn(192, 64, device="cuda", dtype=torch.float16, requires_grad=grad)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                y = _attention(nt, w, 2)
            assert y.requires_grad == grad
            return torch.cuda.memory_allocated()

    assert run(True) - run(False) == 12 * 192 * 2 + 512 * 5


def test_nested_attention_copies_a_layout_its_storage_cannot_be_read_as():
    # components (H, L, D): transposed to (L, H, D) their strides do not descend, so each of q, k and
    # v is copied contiguous; fp32 takes the memory-efficient kernel (no logsumexp without grad)
    with vramscope.capture(gpu="h200"):
        q = torch.nested.nested_tensor([torch.randn(2, n, 64, device="cuda") for n in (5, 7, 3)])
        params = torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, False, False)
        assert torch.backends.cuda.can_use_efficient_attention(params)
        assert not torch.backends.cuda.can_use_flash_attention(params)
        with torch.no_grad():
            y, counts = _delta(lambda: F.scaled_dot_product_attention(q, q, q))
        buffer = 2 * 15 * 64 * 4
        assert counts == (6, 2 * 16 + 3 * buffer + buffer, buffer)
        assert y.is_nested and not y.is_contiguous()


def test_to_padded_tensor_of_a_nested_tensor():
    # `NestedTensor_to_padded_tensor_cuda`: the padded output, then the offsets and sizes copied in as int
    with vramscope.capture(gpu="h200"):
        nt = torch.nested.nested_tensor([torch.randn(n, 64, device="cuda") for n in (5, 7, 3)])
        padded, counts = _delta(lambda: nt.to_padded_tensor(0.0))
        assert counts == (2, 3 * 7 * 64 * 4 + (4 + 3) * 4, 5632) and padded.shape == (3, 7, 64)
        padded, counts = _delta(lambda: torch.nested.to_padded_tensor(nt, 0.0, (3, 8, 64)))
        assert counts == (2, 3 * 8 * 64 * 4 + (4 + 6) * 4, 6144) and padded.shape == (3, 8, 64)


def test_an_op_without_a_rule_on_a_nested_tensor_names_itself():
    with vramscope.capture(gpu="h200"):
        nt = torch.nested.nested_tensor([torch.randn(n, 8, device="cuda") for n in (2, 3)])
        with pytest.raises(NotImplementedError, match=r"aten\.add\.Tensor on a strided nested tensor"):
            nt + nt


def test_nested_view_inherits_sizes_for_minus_one_and_reshape_copies_what_it_cannot_view():
    # Note [Special size rule for nested tensor]: -1 keeps a component's own size, a new dimension
    # takes none; `reshape_nested` clones contiguous where a view cannot be made
    with vramscope.capture(gpu="h200"):
        nt = torch.nested.nested_tensor([torch.randn(n, 6, device="cuda") for n in (2, 3)])
        v, counts = _delta(lambda: nt.view(-1, -1, 2, 3))
        assert counts == (0, 0, 0) and [tuple(c.shape) for c in v.unbind()] == [(2, 2, 3), (3, 2, 3)]
        with pytest.raises(RuntimeError, match="does not infer shape"):
            nt.view(2, -1, 2, -1)
        t = v.transpose(2, 3)
        with pytest.raises(RuntimeError, match=r"Use \.reshape"):
            t.view(2, -1, 6)
        r, counts = _delta(lambda: t.reshape(2, -1, 6))
        assert counts == (1, 5 * 6 * 4, 512) and r.is_contiguous()


def test_a_host_nested_tensor_moved_to_the_device_is_one_buffer():
    # `_to_copy_nested`: `empty_like` on the device, then the buffer's copy
    with vramscope.capture(gpu="h200"):
        host = torch.nested.nested_tensor([torch.randn(n, 8) for n in (2, 3)])
        nt, counts = _delta(lambda: host.to("cuda", torch.float16))
        assert counts == (1, 5 * 8 * 2, 512) and nt.is_cuda and nt.is_nested and nt.dtype == torch.float16
        nt, counts = _delta(lambda: host.cuda())
        assert counts == (1, 5 * 8 * 4, 512) and nt.is_cuda


def test_the_sdpa_tutorials_nested_batch_peaks_as_its_kernels_allocate():
    # pytorch/tutorials' scaled_dot_product_attention_tutorial: `CausalSelfAttention` in eval (its
    # weights require grad) over a strided nested batch under sdpa_kernel(FLASH_ATTENTION); the peak
    # of requested bytes is at `c_proj`'s output: the projections, both cumulative lengths, the
    # attention's output, its logsumexp, rng_state and offset (the flash node keeps them), and the
    # first cuBLAS workspace
    lens, e, h = (300, 256, 512, 260), 512, 8
    with vramscope.capture(gpu="h200"):
        c_attn = torch.nn.Linear(e, 3 * e, bias=False).cuda().half()
        c_proj = torch.nn.Linear(e, e, bias=False).cuda().half()
        nt = torch.nested.nested_tensor([torch.randn(n, e, dtype=torch.float16, device="cuda") for n in lens])
        base = torch.cuda.memory_stats()["requested_bytes.all.current"]
        torch.cuda.reset_peak_memory_stats()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            for _ in range(2):
                c_proj(_attention(nt, c_attn.weight, h))
        peak = torch.cuda.memory_stats()["requested_bytes.all.peak"] - base
    t, b = sum(lens), len(lens)
    workspace = 32 * 1024 * 1024
    assert peak == workspace + t * 3 * e * 2 + 2 * (b + 1) * 4 + t * e * 2 + h * t * 4 + 16 + 8 + t * e * 2


def test_jagged_autocast_cast_backward_stays_on_the_simulated_gpu():
    # blind261/jb03's eager head: autocast casts a jagged activation for `linear`, so the backward's
    # ToCopyBackward0 runs `grad.to(self_options)` through NestedTensor's `_to_copy` (torch/nested/
    # _internal/ops.py: the values' `_to_copy(device=...)`, then `offsets.to(device=values.device)`).
    # The Node saved the simulated tensor's options (meta here, cuda on the GPU); with the backward
    # under the capture's function mode (6be6ef24) the values' copy became a plain meta tensor and
    # the pass raised "values and offsets must be on the same device" where the GPU runs on
    with vramscope.capture(gpu="h200"):
        lin = torch.nn.Linear(16, 4).cuda()
        offsets = torch.tensor([0, 5, 12, 15], device="cuda")
        v = torch.randn(15, 16, device="cuda", requires_grad=True)
        x = torch.nested.nested_tensor_from_jagged(v, offsets, max_seqlen=7)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = lin(x)
        y.values().float().sum().backward()
        assert v.grad is not None and v.grad.is_cuda and v.grad.shape == (15, 16)
        assert lin.weight.grad.is_cuda
