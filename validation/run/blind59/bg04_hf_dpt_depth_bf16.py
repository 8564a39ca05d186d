"""HF DPTForDepthEstimation from a DPTConfig (a ViT-Base backbone on 384x384, reassemble and fusion
stages to a 256-channel neck, the depth head upsampling to full resolution) trained with a
scale-invariant log loss on positive random depth maps at batch 8 under bf16 autocast, AdamW,
2 steps; 3 phases."""

import os

import torch
from transformers import DPTConfig, DPTForDepthEstimation

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5904)
if SMALL:
    config = DPTConfig(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=16,
        backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[8, 16, 32, 32],
        fusion_hidden_size=16,
        head_in_index=-1,
    )
    B, HW = 2, 32
else:
    config = DPTConfig(image_size=384, neck_hidden_sizes=[96, 192, 384, 768], fusion_hidden_size=256)
    B, HW = 8, 384
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DPTForDepthEstimation(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randn(B, 3, HW, HW, device=device)
    depth = torch.rand(B, HW, HW, device=device) * 10 + 0.1
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        pred = model(pixel_values=pixels).predicted_depth
    d = torch.log(pred.float().clamp(min=1e-3)) - torch.log(depth)
    loss = (d.pow(2).mean(dim=(1, 2)) - 0.5 * d.mean(dim=(1, 2)).pow(2)).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del pixels, depth, pred, d, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
