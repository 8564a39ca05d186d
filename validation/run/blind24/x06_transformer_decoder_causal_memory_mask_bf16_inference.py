"""nn.TransformerDecoder (768 wide, 6 layers, 12 heads, batch_first, norm_first) in bf16 under
torch.inference_mode: a causal target of 256 tokens (tgt_is_causal with its mask) over a memory of
1024 positions with a key-padding mask (the last 200 padded), batch 16, then batch 32; 3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2406)
W, H, DEPTH, T, S, PAD = (32, 4, 1, 8, 16, 4) if SMALL else (768, 12, 6, 256, 1024, 200)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
layer = nn.TransformerDecoderLayer(W, H, 4 * W, batch_first=True, norm_first=True)
model = nn.TransformerDecoder(layer, DEPTH).to(device=device, dtype=dtype).eval()
causal = nn.Transformer.generate_square_subsequent_mask(T, device=device, dtype=dtype)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b in (2, 4) if SMALL else (16, 32):
    with torch.inference_mode():
        tgt = torch.randn(b, T, W, device=device, dtype=dtype)
        memory = torch.randn(b, S, W, device=device, dtype=dtype)
        pad = torch.zeros(b, S, dtype=torch.bool, device=device)
        pad[:, S - PAD :] = True
        out = model(tgt, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=pad)
        assert out.shape == (b, T, W)
        del tgt, memory, pad, out
    if device == "cuda":
        print(f"batch {b} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
