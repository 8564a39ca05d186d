"""Allocation sequences of `_native_multi_head_attention`'s own kernels (attention.cu: no SDPA branch
when a mask is given, the weights are asked for, or the head dim is not a multiple of 8) through
`nn.MultiheadAttention` and `nn.TransformerEncoderLayer` in eval under no_grad: one memory history
per case, of a second call (the first takes the library workspaces).

    OUT=DIR python3 validation/run/mha_native_probe.py      (writes DIR/mha_native.json)

fixtures/run/attention/mha_native_h200.json is its output on an H200; python/tests/test_attention.py
runs each case in the twin (`build`) and compares the sequences."""

import json
import os

import torch
import torch.nn as nn

H = torch.cuda.memory


def _mha(e, heads, b, t, dtype=torch.float32):
    mha = nn.MultiheadAttention(e, heads, batch_first=True).cuda().to(dtype).eval()
    x = torch.randn(b, t, e, device="cuda", dtype=dtype)
    return mha, x


def _layer(e, heads, b, t, dtype=torch.float32, **kw):
    layer = nn.TransformerEncoderLayer(e, heads, 4 * e, batch_first=True, **kw).cuda().to(dtype).eval()
    x = torch.randn(b, t, e, device="cuda", dtype=dtype)
    return layer, x


def _causal(t):
    return nn.Transformer.generate_square_subsequent_mask(t, device="cuda")


def _padding(b, t, pad):
    return torch.arange(t, device="cuda")[None].expand(b, t) >= t - pad


def build(name):
    """The case's call (a closure over its module and inputs, built on the current device)."""
    if name == "mha_weights_avg_f32":
        m, x = _mha(768, 12, 8, 197)
        return lambda: m(x, x, x)
    if name == "mha_weights_per_head_f32":
        m, x = _mha(768, 12, 8, 197)
        return lambda: m(x, x, x, average_attn_weights=False)
    if name == "mha_causal_float_f32":
        m, x = _mha(768, 12, 8, 197)
        mask = _causal(197)
        return lambda: m(x, x, x, attn_mask=mask, need_weights=False)
    if name == "mha_padding_bool_f32":
        m, x = _mha(512, 8, 8, 200)
        pad = _padding(8, 200, 20)
        return lambda: m(x, x, x, key_padding_mask=pad, need_weights=False)
    if name == "mha_both_masks_f32":
        m, x = _mha(512, 8, 8, 200)
        mask, pad = _causal(200), _padding(8, 200, 20)
        return lambda: m(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)
    if name == "mha_head_dim_25_f32":
        m, x = _mha(100, 4, 16, 300)
        return lambda: m(x, x, x, need_weights=False)
    if name == "layer_causal_t600_gelu_norm_first_f32":
        m, x = _layer(512, 8, 16, 600, activation="gelu", norm_first=True)
        mask = _causal(600)
        return lambda: m(x, src_mask=mask, is_causal=True)
    if name == "layer_causal_t1100_f32":
        m, x = _layer(256, 8, 4, 1100)
        mask = _causal(1100)
        return lambda: m(x, src_mask=mask)
    if name == "layer_padding_t2048_f16":
        m, x = _layer(256, 4, 4, 2048, dtype=torch.float16)
        pad = _padding(4, 2048, 100)
        return lambda: m(x, src_key_padding_mask=pad)
    if name == "layer_bool_src_mask_t256_f32":
        m, x = _layer(256, 8, 8, 256)
        mask = torch.ones(256, 256, device="cuda", dtype=torch.bool).triu(1)
        return lambda: m(x, src_mask=mask)
    raise ValueError(f"no case {name!r}")


CASES = [
    "mha_weights_avg_f32",
    "mha_weights_per_head_f32",
    "mha_causal_float_f32",
    "mha_padding_bool_f32",
    "mha_both_masks_f32",
    "mha_head_dim_25_f32",
    "layer_causal_t600_gelu_norm_first_f32",
    "layer_causal_t1100_f32",
    "layer_padding_t2048_f16",
    "layer_bool_src_mask_t256_f32",
]


def history(fn):
    """`fn`'s allocator events (alloc and free_requested, sizes as requested)."""
    torch.cuda.synchronize()
    H._record_memory_history(max_entries=100_000)
    before = len(H._snapshot()["device_traces"][0])
    out = fn()
    torch.cuda.synchronize()
    trace = H._snapshot()["device_traces"][0][before:]
    H._record_memory_history(enabled=None)
    del out
    return [(e["action"], e["size"]) for e in trace if e["action"] in ("alloc", "free_requested")]


def main():
    torch.manual_seed(0)
    out = {"torch": torch.__version__, "cases": []}
    with torch.no_grad():
        for name in CASES:
            call = build(name)
            call()  # cuBLAS's workspaces
            out["cases"].append({"name": name, "events": history(call)})
            del call
            torch.cuda.empty_cache()
    path = os.path.join(os.environ.get("OUT", "."), "mha_native.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
