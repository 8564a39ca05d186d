"""Segment Anything (SAM ViT-B sized, from a config) serving in fp16 under `inference_mode`: the
image encoder at 1024 x 1024 once per batch of 4 images, then the prompt encoder and the two-way
mask decoder for 16 point prompts per image, 3 masks each; 2 batches; 3 phases."""

import os

import torch
from transformers import SamConfig, SamModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4803)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
if SMALL:
    vision = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, global_attn_indexes=[1], mlp_dim=64
    )
    config = SamConfig(vision_config=vision)
    B, P, IMG = 1, 2, 1024
else:
    config = SamConfig()
    B, P, IMG = 4, 16, 1024
model = SamModel(config).to(device, dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for batch in range(2):
        pixels = torch.randn(B, 3, IMG, IMG, device=device, dtype=dtype)
        points = torch.rand(B, P, 1, 2, device=device, dtype=dtype) * IMG
        labels = torch.ones(B, P, 1, dtype=torch.long, device=device)
        out = model(pixel_values=pixels, input_points=points, input_labels=labels, multimask_output=True)
        masks = out.pred_masks.float().sigmoid()
        del pixels, points, labels, out, masks
        if device == "cuda":
            peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
            print(f"batch {batch} peak {peak} reserved {reserved}")
            torch.cuda.reset_peak_memory_stats()
