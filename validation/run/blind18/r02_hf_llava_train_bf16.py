"""HF LlavaForConditionalGeneration from a LlavaConfig (a CLIP vision tower: 336 px, patch 14, 768 wide,
12 layers; a Llama text model: 1024 wide, 8 layers, 16 heads, 32,064 vocabulary), bf16 weights, vision
tower frozen, AdamW on the projector and the language model, batch 4 with one image each (576 image
tokens in a 768-token sequence), 2 steps."""

import os

import torch
from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1802)
if SMALL:
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=28,
        patch_size=14,
        projection_dim=32,
    )
    text = LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
    )
    BATCH, TEXT = 2, 8
else:
    vision = CLIPVisionConfig(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=336,
        patch_size=14,
        projection_dim=768,
    )
    text = LlamaConfig(
        vocab_size=32064,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=4096,
    )
    BATCH, TEXT = 4, 192
IMAGE_TOKEN = text.vocab_size - 1
config = LlavaConfig(
    vision_config=vision,
    text_config=text,
    image_token_index=IMAGE_TOKEN,
    vision_feature_layer=-2,
    vision_feature_select_strategy="default",
)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlavaForConditionalGeneration(config).to(device=device, dtype=torch.bfloat16).train()
model.model.vision_tower.requires_grad_(False)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
n_image = (vision.image_size // vision.patch_size) ** 2
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    text_ids = torch.randint(0, IMAGE_TOKEN, (BATCH, TEXT), device=device)
    ids = torch.cat([torch.full((BATCH, n_image), IMAGE_TOKEN, device=device), text_ids], dim=1)
    pixels = torch.randn(BATCH, 3, vision.image_size, vision.image_size, device=device, dtype=torch.bfloat16)
    labels = ids.masked_fill(ids == IMAGE_TOKEN, -100)
    loss = model(input_ids=ids, pixel_values=pixels, attention_mask=torch.ones_like(ids), labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
