"""HF Swinv2ForImageClassification from a Swinv2Config (Swin-V2-Tiny: window 8, cosine attention
with a log-spaced continuous position bias MLP, residual post-norm) trained from scratch on
256x256 at batch 64 under bf16 autocast with label smoothing and AdamW, 2 steps; then evaluation
of 128 images under inference_mode; 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Swinv2Config, Swinv2ForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5905)
if SMALL:
    config = Swinv2Config(
        image_size=32, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4, num_labels=10
    )
    B, HW = 2, 32
else:
    config = Swinv2Config(image_size=256, window_size=8, num_labels=1000)
    B, HW = 64, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Swinv2ForImageClassification(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randn(B, 3, HW, HW, device=device)
    labels = torch.randint(0, config.num_labels, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(pixel_values=pixels).logits
        loss = F.cross_entropy(logits, labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del pixels, labels, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    logits = model(pixel_values=torch.randn(2 * B, 3, HW, HW, device=device)).logits
if device == "cuda":
    print(f"eval {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}")
