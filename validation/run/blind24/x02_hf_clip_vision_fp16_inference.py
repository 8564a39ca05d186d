"""HF CLIPVisionModelWithProjection from a CLIPVisionConfig (ViT-B/32: 768 wide, 12 layers, 12
heads, 32-pixel patches at 224), fp16 weights, image embeddings under no_grad at batch 64, then 256;
3 phases."""

import os

import torch
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2402)
if SMALL:
    config = CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, image_size=64
    )
    SIZES, R = (2, 4), 64
else:
    config = CLIPVisionConfig(patch_size=32, projection_dim=512)
    SIZES, R = (64, 256), 224
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = CLIPVisionModelWithProjection(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b in SIZES:
    pixels = torch.randn(b, 3, R, R, device=device, dtype=dtype)
    with torch.no_grad():
        emb = model(pixel_values=pixels).image_embeds
        emb = emb / emb.norm(dim=-1, keepdim=True)
    del pixels, emb
    if device == "cuda":
        print(f"batch {b} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
