"""cuDNN fused attention (SDPA forced to the cuDNN backend, no autograd) at the shapes decoding gives
it: a few query positions against a long key/value cache, queries laid out as Hugging Face's
attention makes them ((b, s_q, h, d) transposed), keys and values contiguous, grouped-query heads
with enable_gqa, no mask or a boolean or float (b, 1, s_q, s_kv) mask; bf16 over batch, heads,
head dim and cache length, fp16 at head dim 128. Every allocation and free in order (sweep_case.py):
the outputs and the plan's workspace. On a GPU:
`python3 cudnn_decode_sweep.py > fixtures/run/sweeps/cudnn_decode_h200.jsonl`."""

import json

import torch
import torch.nn.functional as F
from sweep_case import case
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = "cuda"
HEADS = ((1, 16, 16), (8, 16, 16), (8, 16, 4), (3, 32, 8), (8, 8, 1), (2, 12, 12), (16, 32, 4))


def attend(q, k, v, mask):
    with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1])


def one(dtype, b, h, hk, d, s_kv, mask_kind, s_q):
    name = f"{str(dtype).split('.')[-1]} b{b} h{h} hk{hk} d{d} skv{s_kv} sq{s_q} mask={mask_kind}"
    q = torch.randn(b, s_q, h, d, device=dev, dtype=dtype).transpose(1, 2)
    k = torch.randn(b, hk, s_kv, d, device=dev, dtype=dtype)
    v = torch.randn(b, hk, s_kv, d, device=dev, dtype=dtype)
    mask = None
    if mask_kind == "bool":
        mask = torch.ones(b, 1, s_q, s_kv, device=dev, dtype=torch.bool)
    elif mask_kind == "float":
        mask = torch.zeros(b, 1, s_q, s_kv, device=dev, dtype=dtype)
    try:
        case(name, (q, k, v, mask), attend, True)
    except RuntimeError as e:
        print(json.dumps({"case": name, "error": str(e).splitlines()[0][:200]}), flush=True)
    del q, k, v, mask


for b, h, hk in HEADS:
    for d in (64, 128, 256):
        for s_kv in (33, 513, 2049):
            for mask_kind in ("none", "bool", "float"):
                one(torch.bfloat16, b, h, hk, d, s_kv, mask_kind, 1)
            if s_kv == 513:
                for s_q in (2, 7):
                    one(torch.bfloat16, b, h, hk, d, s_kv, "none", s_q)
                    one(torch.bfloat16, b, h, hk, d, s_kv, "bool", s_q)
    for s_kv in (33, 513, 2049):
        for mask_kind in ("none", "bool", "float"):
            one(torch.float16, b, h, hk, 128, s_kv, mask_kind, 1)
