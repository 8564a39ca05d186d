"""HF ViTMAEForPreTraining from a ViTMAEConfig (ViT-Base encoder, 8-layer 512-wide decoder, mask
ratio 0.75: per-sample noise argsorted, the kept patches gathered, the mask tokens unshuffled,
normalized-pixel loss), pretraining on 224x224 images at batch 64 under bf16 autocast, AdamW, 2
steps; 3 phases."""

import os

import torch
from transformers import ViTMAEConfig, ViTMAEForPreTraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6603)
if SMALL:
    config = ViTMAEConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        decoder_hidden_size=16,
        decoder_num_hidden_layers=1,
        decoder_num_attention_heads=2,
        decoder_intermediate_size=32,
        image_size=64,
        norm_pix_loss=True,
    )
    B = 2
else:
    config = ViTMAEConfig(norm_pix_loss=True)
    B = 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ViTMAEForPreTraining(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1.5e-4, betas=(0.9, 0.95), weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, config.image_size, config.image_size, device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(pixel_values=images).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
