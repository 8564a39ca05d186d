"""Rules of sessions 35-36 that came from source without a measurement, called directly so the per-op
truth (ops_truth.py) names each one's allocations: flash attention's split-KV forward for one query
row (plain heads, and GQA heads, where flash_api.cpp swaps the query's head groups into rows), its
deterministic backward (dq_accum in ceil(SMs / (B * H)) splits), and cuDNN's LSTM inference workspace
of blind150/et06's evaluation (2 layers of 1,024 over 384 inputs, bf16 autocast, batch 128 x 800
frames). A phase per case; `SMOKE=1` shrinks the sizes for a CPU run."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3601)
device = "cuda" if torch.cuda.is_available() else "cpu"
dt = torch.bfloat16 if device == "cuda" else torch.float32
S = 256 if SMALL else 1


def phase(name):
    if device == "cuda":
        torch.cuda.synchronize()
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def decode(b, hq, hkv, sk, d):
    q = torch.randn(b, hq, 1, d, device=device, dtype=dt)
    k = torch.randn(b, hkv, sk // S, d, device=device, dtype=dt)
    v = torch.randn(b, hkv, sk // S, d, device=device, dtype=dt)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION if device == "cuda" else SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=hq != hkv)
    return out.float().sum().item()


# flash forward, one query row: plain heads, then GQA heads (32 query heads over 8 key-value heads)
decode(4, 32, 32, 8192, 128)
decode(2, 16, 16, 16384, 64)
phase("decode_plain")
decode(4, 32, 8, 8192, 128)
decode(1, 64, 8, 32768, 128)
phase("decode_gqa")

# flash backward under deterministic algorithms: dq_accum in splits
torch.use_deterministic_algorithms(True, warn_only=True)
for b, h, s, d in ((2, 8, 2048, 128), (1, 4, 4096, 64)):
    q, k, v = (torch.randn(b, h, s // S, d, device=device, dtype=dt, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION if device == "cuda" else SDPBackend.MATH):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    del q, k, v, out
torch.use_deterministic_algorithms(False)
phase("deterministic_backward")

# blind150/et06's LSTM in evaluation: bf16 autocast over a transposed bf16 activation
lstm = (
    nn.LSTM(384, 1024 // (8 if SMALL else 1), num_layers=2, batch_first=True, dropout=0.1).to(device).eval()
)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
    for batch in (128, 48):
        x = torch.randn(batch, 384, 800 // S, device=device, dtype=dt)
        y, _ = lstm(x.transpose(1, 2))
        del x, y
phase("lstm_inference")
