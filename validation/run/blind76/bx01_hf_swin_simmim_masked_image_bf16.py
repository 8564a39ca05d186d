"""HF SwinForMaskedImageModeling (SimMIM pretraining: Swin-B-like, 4 stages, window 7, 60% of the
patches replaced by a learned mask token, a pixel-shuffle decoder, L1 loss on the masked pixels)
built from its config, fp32 weights under bf16 autocast, AdamW, batch 32 at 224x224, 2 steps; 3 phases."""

import os

import torch
from transformers import SwinConfig, SwinForMaskedImageModeling

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7601)
if SMALL:
    config = SwinConfig(
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1],
        num_heads=[1, 2],
        window_size=4,
        encoder_stride=8,
    )
    B, S = 2, 32
else:
    config = SwinConfig(
        image_size=224,
        patch_size=4,
        embed_dim=128,
        depths=[2, 2, 18, 2],
        num_heads=[4, 8, 16, 32],
        window_size=7,
        encoder_stride=32,
    )
    B, S = 32, 224
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SwinForMaskedImageModeling(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
n = (S // config.patch_size) ** 2
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, S, S, device=device)
    mask = (torch.rand(B, n, device=device).argsort(dim=1) < int(0.6 * n)).long()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(pixel_values=x, bool_masked_pos=mask).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, mask, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
