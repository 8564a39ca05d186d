"""Semantic segmentation with an HF SegformerForSemanticSegmentation from config (MiT-b1 sized:
efficient self-attention with spatial-reduction convolutions, Mix-FFN depthwise convolutions, an
all-MLP decode head), fp32, AdamW (foreach), batch 8 at 512x512, 150 classes, labels upsampled
loss, 2 steps; 3 phases."""

import os

import torch
from transformers import SegformerConfig, SegformerForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4105)
if SMALL:
    config = SegformerConfig(
        hidden_sizes=[8, 16, 24, 32],
        num_attention_heads=[1, 1, 2, 2],
        depths=[1, 1, 1, 1],
        decoder_hidden_size=32,
        num_labels=5,
    )
    B, H = 2, 64
else:
    config = SegformerConfig(
        hidden_sizes=[64, 128, 320, 512],
        num_attention_heads=[1, 2, 5, 8],
        depths=[2, 2, 2, 2],
        decoder_hidden_size=256,
        num_labels=150,
    )
    B, H = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SegformerForSemanticSegmentation(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randn(B, 3, H, H, device=device)
    labels = torch.randint(0, config.num_labels, (B, H, H), device=device)
    loss = model(pixel_values=pixels, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del pixels, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
