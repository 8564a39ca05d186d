"""HF VideoMAEForVideoClassification (ViT-S-sized: 12 layers, 384 wide, 16 frames of 224x224 in
2x16x16 tubelets, 1,568 tokens, mean pooling) fine-tuned in bf16 weights into 174 classes with
label smoothing, AdamW with a cosine schedule, batch 4, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import VideoMAEConfig, VideoMAEForVideoClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8303)
if SMALL:
    config = VideoMAEConfig(
        image_size=32,
        num_frames=4,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=174,
    )
    B = 2
else:
    config = VideoMAEConfig(
        hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536, num_labels=174
    )
    B = 4
device = "cuda" if torch.cuda.is_available() else "cpu"
model = VideoMAEForVideoClassification(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
shape = (B, config.num_frames, 3, config.image_size, config.image_size)
for step in range(2):
    video = torch.randn(shape, device=device, dtype=torch.bfloat16)
    labels = torch.randint(0, config.num_labels, (B,), device=device)
    logits = model(pixel_values=video).logits
    loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
