"""cuDNN fused attention at one query position (SDPA forced to the cuDNN backend, no autograd, bf16):
the workspace of its split-KV plan over the key/value length and the number of batch x key-value heads,
to read the split count off. Every allocation and free in order (sweep_case.py). On a GPU:
`python3 cudnn_decode_splits.py > fixtures/run/sweeps/cudnn_decode_splits_h200.jsonl`."""

import torch
import torch.nn.functional as F
from sweep_case import case
from torch.nn.attention import SDPBackend, sdpa_kernel

dev = "cuda"


def attend(q, k, v):
    with torch.no_grad(), sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=k.shape[1] != q.shape[1])


def one(b, h, hk, d, s_kv):
    q = torch.randn(b, 1, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(b, hk, s_kv, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(b, hk, s_kv, d, device=dev, dtype=torch.bfloat16)
    case(f"b{b} h{h} hk{hk} d{d} skv{s_kv}", (q, k, v), attend, True)


LENGTHS = (64, 127, 128, 129, 255, 256, 257, 383, 384, 385, 640, 1024, 1025, 4096, 8193, 16384)
for n in (1, 2, 3, 4, 6, 8, 12, 16, 17, 20, 24, 32, 33, 40, 48, 64, 65, 66, 80, 96, 112, 127, 128, 132, 133, 256):
    for s_kv in LENGTHS:
        one(n, 4, 1, 64, s_kv)
for b, h, hk in ((1, 8, 8), (1, 32, 32), (2, 32, 32), (4, 32, 8), (1, 64, 8), (2, 40, 40), (1, 96, 96), (1, 128, 128)):
    for s_kv in (257, 1024, 4096, 8193):
        for d in (64, 128):
            one(b, h, hk, d, s_kv)
