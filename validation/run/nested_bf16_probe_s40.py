"""nn.TransformerEncoder's nested fast path in bfloat16 (session 40's probe): the twin models the
nested path in fp16 and fp32 and answers a bf16 encoder as the dense upper bound, where the GPU packs
the valid tokens (`nested_from_padded` and `to_padded_tensor`, whose CUDA kernels take fp32/fp16 and
fall back to generic ones otherwise). A 6-layer encoder (d_model 512, 8 heads, ffn 2048, batch_first)
cast to bf16, in eval with a left-aligned padding mask built on the host: no_grad at batch 64 x 512,
inference_mode at 32 x 1024 with other lengths, then the same encoder cast to fp16 (the modelled path)
as a control, then bf16 with 4 heads (head dim 128). One phase per case; `SMOKE=1` shrinks the sizes."""

import os

import torch

SMALL = bool(os.environ.get("SMOKE"))
device = "cuda" if torch.cuda.is_available() else "cpu"
D, H, F, L = (64, 4, 128, 2) if SMALL else (512, 8, 2048, 6)


def encoder(heads):
    layer = torch.nn.TransformerEncoderLayer(D, heads, F, dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=True).to(device).eval()


def padded(batch, seq):
    lengths = torch.randint(seq // 8, seq + 1, (batch,))
    mask = torch.arange(seq)[None, :] >= lengths[:, None]
    x = torch.randn(batch, seq, D)
    return x, mask


torch.manual_seed(4001)
enc = encoder(H).to(torch.bfloat16)
x1, m1 = padded(8 if SMALL else 64, 32 if SMALL else 512)
x1, m1 = x1.to(device, torch.bfloat16), m1.to(device)
torch.cuda.reset_peak_memory_stats() if device == "cuda" else None

with torch.no_grad():
    y = enc(x1, src_key_padding_mask=m1)
print("bf16 no_grad", tuple(y.shape), y.dtype)
del y
torch.cuda.reset_peak_memory_stats() if device == "cuda" else None

x2, m2 = padded(4 if SMALL else 32, 64 if SMALL else 1024)
x2, m2 = x2.to(device, torch.bfloat16), m2.to(device)
with torch.inference_mode():
    y = enc(x2, src_key_padding_mask=m2)
print("bf16 inference_mode", tuple(y.shape), y.dtype)
del y
torch.cuda.reset_peak_memory_stats() if device == "cuda" else None

enc = enc.to(torch.float16)
with torch.no_grad():
    y = enc(x1.half(), src_key_padding_mask=m1)
print("fp16 no_grad", tuple(y.shape), y.dtype)
del y, enc
torch.cuda.reset_peak_memory_stats() if device == "cuda" else None

enc = encoder(H // 2).to(torch.bfloat16)
with torch.no_grad():
    y = enc(x1, src_key_padding_mask=m1)
print("bf16 head dim", D // (H // 2), tuple(y.shape), y.dtype)
