"""nn.TransformerEncoder in eval under torch.no_grad (the native fast path): a dense batch, then a
padded batch with src_key_padding_mask (nested-tensor path)."""

import os

import torch
import torch.nn as nn

B, S, D, HEADS, LAYERS = (2, 16, 64, 4, 2) if os.environ.get("SMOKE") else (32, 512, 768, 12, 6)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

layer = nn.TransformerEncoderLayer(D, HEADS, dim_feedforward=4 * D, dropout=0.1, batch_first=True)
encoder = nn.TransformerEncoder(layer, num_layers=LAYERS, enable_nested_tensor=True).to(device)
encoder.eval()
src = torch.randn(B, S, D, device=device)
lengths = torch.randint(S // 4, S + 1, (B,), device=device)
padding_mask = torch.arange(S, device=device)[None, :] >= lengths[:, None]
if device == "cuda":
    print(f"weights+inputs {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    out = encoder(src)
    if device == "cuda":
        print(f"dense forward peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    out_masked = encoder(src, src_key_padding_mask=padding_mask)
    if device == "cuda":
        print(
            f"padded forward peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
print(out.shape, out_masked.shape)
