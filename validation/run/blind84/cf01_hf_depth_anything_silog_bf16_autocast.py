"""HF DepthAnythingForDepthEstimation (Depth-Anything-Small: a DINOv2 ViT-S/14 backbone built from
its config, DPT reassemble and fusion neck, 64-wide fusion) fine-tuned for metric depth with a
scale-invariant log loss over valid pixels, under bf16 autocast, AdamW with a 10x smaller backbone
learning rate, batch 8 of 392x392, 2 steps; then a 518x518 evaluation batch under no_grad; 4 phases."""

import os

import torch
from transformers import DepthAnythingConfig, DepthAnythingForDepthEstimation, Dinov2Config

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8401)
if SMALL:
    backbone = Dinov2Config(
        image_size=28,
        patch_size=14,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        out_indices=[1, 2, 3, 4],
        reshape_hidden_states=False,
        apply_layernorm=True,
    )
    config = DepthAnythingConfig(
        backbone_config=backbone,
        reassemble_hidden_size=32,
        neck_hidden_sizes=[8, 16, 32, 32],
        fusion_hidden_size=16,
        head_hidden_size=8,
    )
    B, S, S2 = 2, 56, 70
else:
    config = DepthAnythingConfig(depth_estimation_type="metric", max_depth=20)
    B, S, S2 = 8, 392, 518
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DepthAnythingForDepthEstimation(config).to(device)
backbone_params = list(model.backbone.parameters())
ids = {id(p) for p in backbone_params}
optimizer = torch.optim.AdamW(
    [
        {"params": backbone_params, "lr": 5e-6},
        {"params": [p for p in model.parameters() if id(p) not in ids]},
    ],
    lr=5e-5,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    image = torch.randn(B, 3, S, S, device=device)
    target = torch.rand(B, S, S, device=device) * 20
    valid = target > 0.5
    with torch.autocast(device, dtype=torch.bfloat16):
        depth = model(pixel_values=image).predicted_depth
    diff = torch.log(depth.float().clamp(min=1e-3)) - torch.log(target)
    diff = diff * valid
    n = valid.sum()
    loss = torch.sqrt((diff**2).sum() / n - 0.85 * (diff.sum() / n) ** 2)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del depth, diff, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    depth = model(pixel_values=torch.randn(B, 3, S2, S2, device=device)).predicted_depth
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
