"""HF SegformerForSemanticSegmentation from a SegformerConfig (MiT-B0 sizes: widths 32/64/160/256,
efficient attention with reduction ratios 8/4/2/1, the all-MLP decode head), 150 ADE20K classes,
trained on 512x512 crops at batch 8 under bf16 autocast (the logits upsampled to the labels inside
the model's loss, ignore index 255), AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import SegformerConfig, SegformerForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6102)
if SMALL:
    config = SegformerConfig(hidden_sizes=[8, 16, 16, 32], decoder_hidden_size=32, num_labels=5)
    B, S = 2, 64
else:
    config = SegformerConfig(num_labels=150, semantic_loss_ignore_index=255)
    B, S = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SegformerForSemanticSegmentation(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-5, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device)
    labels = torch.randint(0, config.num_labels, (B, S, S), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(pixel_values=images, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
