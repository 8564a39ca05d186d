"""HF SegformerForSemanticSegmentation from a SegformerConfig (mit-b1-like: hidden sizes 64/128/320/512,
depths 2/2/2/2, spatial-reduction attention), 150 classes, 512 px, fp32 weights under bf16 autocast,
AdamW, labels at full resolution (the model upsamples its logits for the loss), batch 8, 2 steps."""

import os

import torch
from transformers import SegformerConfig, SegformerForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1602)
if SMALL:
    config = SegformerConfig(
        num_labels=5,
        hidden_sizes=[8, 16, 24, 32],
        depths=[1, 1, 1, 1],
        num_attention_heads=[1, 1, 1, 1],
        decoder_hidden_size=32,
    )
    BATCH, RES = 2, 64
else:
    config = SegformerConfig(
        num_labels=150,
        hidden_sizes=[64, 128, 320, 512],
        depths=[2, 2, 2, 2],
        num_attention_heads=[1, 2, 5, 8],
        decoder_hidden_size=256,
    )
    BATCH, RES = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SegformerForSemanticSegmentation(config).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randn(BATCH, 3, RES, RES, device=device)
    labels = torch.randint(0, config.num_labels, (BATCH, RES, RES), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(pixel_values=pixels, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
