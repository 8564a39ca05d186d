"""HF UperNetForSemanticSegmentation with a ConvNeXt-Tiny backbone (from configs: a pyramid pooling
module and an FPN head over four stages, an auxiliary FCN head), 150 classes, trained on 512x512
crops at batch 8 under bf16 autocast with AdamW, 2 steps; 3 phases."""

import os

import torch
from transformers import ConvNextConfig, UperNetConfig, UperNetForSemanticSegmentation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6502)
if SMALL:
    backbone = ConvNextConfig(
        depths=[1, 1, 1, 1],
        hidden_sizes=[8, 16, 16, 32],
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = UperNetConfig(backbone_config=backbone, hidden_size=16, auxiliary_channels=8, num_labels=5)
    B, S = 2, 64
else:
    backbone = ConvNextConfig(
        depths=[3, 3, 9, 3],
        hidden_sizes=[96, 192, 384, 768],
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = UperNetConfig(backbone_config=backbone, num_labels=150)
    B, S = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = UperNetForSemanticSegmentation(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-5)
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
