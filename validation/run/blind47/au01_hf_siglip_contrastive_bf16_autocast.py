"""SigLIP contrastive pre-training from a config: a ViT-B/16-sized image tower at 224 and a 12-layer
text tower over 64 tokens, the pairwise sigmoid loss of `SiglipModel(return_loss=True)`, bf16
autocast over fp32 weights, fused AdamW, batch 96, 2 steps; 3 phases."""

import os

import torch
from transformers import SiglipConfig, SiglipModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4701)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    B, L, IMG, PATCH = 4, 8, 32, 16
else:
    text = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
    vision = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
    B, L, IMG, PATCH = 96, 64, 224, 16
config = SiglipConfig(
    text_config=dict(vocab_size=49408, max_position_embeddings=L, **text),
    vision_config=dict(image_size=IMG, patch_size=PATCH, **vision),
)
config._attn_implementation = "sdpa"
model = SiglipModel(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, 49408, (B, L), device=device)
    pixels = torch.randn(B, 3, IMG, IMG, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(input_ids=ids, pixel_values=pixels, return_loss=True)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, pixels, out
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
