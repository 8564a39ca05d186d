"""Autoregressive decoding without a cache: an nn.TransformerDecoder (6 layers, 512 wide, causal
mask) over a fixed encoder memory, in fp16 under no_grad, re-running the whole prefix for each of
96 new tokens, batch 32, the argmax of the last position appended each step; 2 phases (the decode,
then after freeing)."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4505)
B, S_MEM, NEW, D, V = (2, 8, 4, 32, 50) if SMALL else (32, 256, 96, 512, 16000)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
layer = nn.TransformerDecoderLayer(D, 8, 4 * D, dropout=0.1, batch_first=True)
decoder = nn.TransformerDecoder(layer, 6).to(device, dtype).eval()
embed = nn.Embedding(V, D).to(device, dtype)
head = nn.Linear(D, V).to(device, dtype)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    memory = torch.randn(B, S_MEM, D, device=device, dtype=dtype)
    tokens = torch.zeros(B, 1, dtype=torch.long, device=device)
    for _ in range(NEW):
        n = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=device, dtype=dtype)
        h = decoder(embed(tokens), memory, tgt_mask=mask, tgt_is_causal=True)
        nxt = head(h[:, -1]).argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
if device == "cuda":
    print(f"decode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del memory, tokens, h, nxt, mask
if device == "cuda":
    print(f"freed allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
