"""HF ViTMAEForPreTraining from a ViTMAEConfig (ViT-B encoder, 8-layer 512-wide decoder, mask ratio 0.75:
random masking by argsort of noise and gather), fp32 weights under bf16 autocast, AdamW (foreach),
batch 64 at 224, 3 steps."""

import os

import torch
from transformers import ViTMAEConfig, ViTMAEForPreTraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1203)
if SMALL:
    config = ViTMAEConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32,
                          patch_size=8, decoder_hidden_size=32, decoder_num_hidden_layers=1, decoder_num_attention_heads=2,
                          decoder_intermediate_size=64)
    BATCH = 2
else:
    config = ViTMAEConfig()
    BATCH = 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ViTMAEForPreTraining(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1.5e-4, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    pixels = torch.randn(BATCH, 3, config.image_size, config.image_size, device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(pixel_values=pixels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
