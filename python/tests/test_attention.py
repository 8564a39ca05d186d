"""`nn.MultiheadAttention`'s fused inference path, as the GPU's allocator counted it (ops truth of
validation/run/03_torchvision_vit_inference.py, fixtures/run/truth_h200.tar.xz)."""

from __future__ import annotations

import torch
import vramscope


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


def test_attention_weights_keep_the_module_path():
    with vramscope.capture():
        mha = torch.nn.MultiheadAttention(768, 12, batch_first=True).cuda().eval()
        x = torch.empty(8, 197, 768, device="cuda")
        with torch.no_grad():
            mha(x, x, x, need_weights=True)
            (_, weights), counts = _counts(lambda: mha(x, x, x, need_weights=True))
        assert weights.shape == (8, 197, 197) and counts[0] > 3


def test_math_path_softmax_allocates_what_the_gpu_counted():
    # ops truth of blind4/d02 (T5, SDPA's math path) on an H200: _safe_softmax of (16, 8, 128, 128)
    # fp32 took 3 temporaries of 4 + 2097152 + 16384 bytes; its backward one of the gradient's size
    with vramscope.capture():
        x = torch.empty(16, 8, 128, 128, device="cuda")
        out, counts = _counts(lambda: torch.ops.aten._safe_softmax(x, -1))
        assert counts == (4, 8388608 + 4 + 2097152 + 16384)
        _, counts = _counts(lambda: torch.ops.aten._softmax_backward_data(x, out, -1, torch.float32))
        assert counts == (2, 2 * 8388608)
