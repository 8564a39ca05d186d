"""`nn.TransformerEncoder` (12 layers, 768 wide, batch_first, enable_nested_tensor) in fp16 eval
under inference_mode with a `src_key_padding_mask` (lengths 128..1,024 of 1,024): the fast path turns
the padded batch into a nested tensor and runs `_transformer_encoder_layer_fwd` on it; batch 32, then
batch 64 with a fuller mask; 2 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7706)
D, H, N, L = (32, 4, 2, 16) if SMALL else (768, 12, 12, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
layer = nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.1, batch_first=True)
model = nn.TransformerEncoder(layer, N, enable_nested_tensor=True).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for i, (B, lo) in enumerate([(32, L // 8), (64, L // 2)]):
    x = torch.randn(B, L, D, device=device, dtype=dtype)
    lengths = torch.linspace(lo, L, B, device=device).long()
    pad = torch.arange(L, device=device)[None, :] >= lengths[:, None]
    with torch.inference_mode():
        y = model(x, src_key_padding_mask=pad)
    del x, lengths, pad, y
    if device == "cuda":
        print(f"batch {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
