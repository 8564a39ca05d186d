"""HF Dinov2Model from a Dinov2Config (dinov2-base sizes: 12 layers, 768 wide, patch 14) in fp16 under
torch.inference_mode with output_hidden_states, 2 batches of 128 images of 224x224, the CLS tokens of
every layer kept; 3 phases."""

import os

import torch
from transformers import Dinov2Config, Dinov2Model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7305)
if SMALL:
    config = Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=56)
    B, S = 2, 56
else:
    config = Dinov2Config(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, image_size=224)
    B, S = 128, 224
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = Dinov2Model(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
kept = []
with torch.inference_mode():
    for i in range(2):
        pixels = torch.randn(B, 3, S, S, device=device, dtype=dtype)
        out = model(pixel_values=pixels, output_hidden_states=True)
        kept.append(torch.stack([h[:, 0] for h in out.hidden_states], dim=1))
        del pixels, out
        if device == "cuda":
            print(
                f"batch {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
print(f"kept {len(kept)}")
