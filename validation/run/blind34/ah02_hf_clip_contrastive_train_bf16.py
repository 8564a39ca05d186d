"""Contrastive image-text pretraining as open_clip users write it with HF: a CLIPModel from config
(ViT-B/32 vision tower at 224 px, a 12-layer 512-wide text tower at 77 tokens) in bf16, the
symmetric InfoNCE loss over the batch's logits_per_image (the model's own return_loss), batch 128;
sdpa attention, AdamW (foreach) with weight decay, 2 steps; 3 phases."""

import os

import torch
from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPVisionConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3402)
if SMALL:
    text = CLIPTextConfig(
        vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4
    )
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=32,
        patch_size=8,
    )
    B, T, P = 4, 12, 32
else:
    text = CLIPTextConfig(
        vocab_size=49408, hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8
    )
    vision = CLIPVisionConfig(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=224,
        patch_size=32,
    )
    B, T, P = 128, 77, 224
config = CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=512)
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CLIPModel(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.2)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, text.vocab_size, (B, T), device=device)
    pixels = torch.randn(B, 3, P, P, device=device, dtype=torch.bfloat16)
    loss = model(input_ids=ids, pixel_values=pixels, return_loss=True).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, pixels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
