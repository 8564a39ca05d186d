"""Fine-tuning at a higher resolution: an HF ViTForImageClassification from config (ViT-B/16 built
for 224) run at 384x384 with interpolate_pos_encoding=True (bicubic resize of the position
embeddings each step), bf16 autocast, AdamW (fused), batch 32, 2 steps; 3 phases."""

import os

import torch
from transformers import ViTConfig, ViTForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4605)
if SMALL:
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=10,
    )
    B, HW = 2, 64
else:
    config = ViTConfig(image_size=224, patch_size=16, num_labels=100)
    B, HW = 32, 384
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ViTForImageClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, HW, HW, device=device)
    y = torch.randint(0, config.num_labels, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(pixel_values=x, labels=y, interpolate_pos_encoding=True).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
