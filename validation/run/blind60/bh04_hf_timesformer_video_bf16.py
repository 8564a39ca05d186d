"""HF TimesformerForVideoClassification from a TimesformerConfig (divided space-time attention,
8 frames of 224x224, ViT-Base width) trained on 400 classes at batch 8 under bf16 autocast, AdamW
with gradient clipping, 2 steps; then evaluation of 16 clips under no_grad; 4 phases."""

import os

import torch
from transformers import TimesformerConfig, TimesformerForVideoClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6004)
if SMALL:
    config = TimesformerConfig(
        image_size=32,
        patch_size=16,
        num_frames=2,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=5,
    )
    B = 2
else:
    config = TimesformerConfig(image_size=224, num_frames=8, num_labels=400)
    B = 8
device = "cuda" if torch.cuda.is_available() else "cpu"
model = TimesformerForVideoClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    clips = torch.randn(B, config.num_frames, 3, config.image_size, config.image_size, device=device)
    labels = torch.randint(0, config.num_labels, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(pixel_values=clips, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clips, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    clips = torch.randn(2 * B, config.num_frames, 3, config.image_size, config.image_size, device=device)
    logits = model(pixel_values=clips).logits
if device == "cuda":
    print(f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}")
