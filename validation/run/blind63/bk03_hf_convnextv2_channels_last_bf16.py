"""HF ConvNextV2ForImageClassification from a ConvNextV2Config (Tiny: depths 3/3/9/3, widths
96/192/384/768, global response normalization), channels-last under bf16 autocast on 224x224 images
at batch 64, AdamW, 2 steps, then evaluation of one batch under inference_mode; 4 phases."""

import os

import torch
from transformers import ConvNextV2Config, ConvNextV2ForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6303)
if SMALL:
    config = ConvNextV2Config(depths=[1, 1, 1, 1], hidden_sizes=[8, 16, 16, 32], num_labels=10)
    B, S = 2, 64
else:
    config = ConvNextV2Config(depths=[3, 3, 9, 3], hidden_sizes=[96, 192, 384, 768], num_labels=1000)
    B, S = 64, 224
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ConvNextV2ForImageClassification(config).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    images = torch.randn(B, 3, S, S, device=device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, config.num_labels, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(pixel_values=images, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del images, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    logits = model(pixel_values=torch.randn(B, 3, S, S, device=device)).logits
del logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
