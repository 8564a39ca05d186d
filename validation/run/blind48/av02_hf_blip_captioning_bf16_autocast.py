"""BLIP image captioning trained from a config: a ViT-B/16 vision tower at 384 and a 12-layer BERT
text decoder with cross-attention over the image tokens, captions of 40 tokens, the LM loss of
`BlipForConditionalGeneration(labels=...)`, bf16 autocast over fp32 weights, AdamW (foreach),
batch 24, 2 steps; 3 phases."""

import os

import torch
from transformers import BlipConfig, BlipForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4802)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    size = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
    config = BlipConfig(
        vision_config=dict(image_size=32, patch_size=16, **size),
        text_config=dict(vocab_size=1000, encoder_hidden_size=32, **size),
    )
    B, L, IMG, V = 2, 8, 32, 1000
else:
    config = BlipConfig(vision_config=dict(image_size=384), text_config=dict(vocab_size=30524))
    B, L, IMG, V = 24, 40, 384, 30524
model = BlipForConditionalGeneration(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    pixels = torch.randn(B, 3, IMG, IMG, device=device)
    ids = torch.randint(100, V, (B, L), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(pixel_values=pixels, input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del pixels, ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
